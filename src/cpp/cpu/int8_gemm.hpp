// The int8 GEMMs of int8_sketched_matmul (include/sketchcore/int8_matmul.hpp) on the CPU:
// the packed factor layout, the per-row activation quantization, the register kernels of each
// instruction set (cpu/int8_kernels_amx.cpp, cpu/int8_kernels_avx512.cpp, cpu/int8_kernels_avx2.cpp,
// portable here) and the
// driver that tiles a product over sketchcore's workers (cpu/int8_gemm.cpp).
//
// Layout of a packed k × n factor: panels of kPanelCols = 64 columns; in a panel, group g of
// four rows (4g … 4g+3) is 256 bytes, column j's four values at bytes 4j … 4j+3, so one 64-byte
// vector load gives 16 columns × 4 rows, what VPDPBUSD multiplies against four consecutive
// activations broadcast to every lane. Rows past k and columns past n are zero.
//
// VPDPBUSD (and AMX's TDPBUSD) multiplies unsigned by signed bytes, so the VNNI and AMX kernels take the activations as
// a + 128 (unsigned) and subtract 128 · Σ_i q[i][j] (column_offsets) from each sum; the AVX2 and
// portable kernels take them signed. Every sum is exact in int32 (|Σ| ≤ 255·127·k < 2^31 for
// k < 66,000; the core refuses larger k).
#pragma once

#include <cstdint>
#include <memory>

#include "sketchcore/epilogue.hpp"
#include "detail/quantized_storage.hpp"
#include "sketchcore/int8_matmul.hpp"

namespace sketchcore {

/// The packed form of an Int8Factor (layout above), made by pack_int8_factor and kept by the
/// factor's storage as its host copy (detail/quantized_storage.hpp).
struct Int8Factor::Packed {
  std::int64_t rows = 0, cols = 0;
  std::int64_t groups = 0;  ///< ⌈rows/4⌉ four-row groups
  std::int64_t panels = 0;  ///< ⌈cols/64⌉ panels
  std::int8_t* values = nullptr;          ///< panels · groups · 256 bytes, 64-byte aligned
  float* scales = nullptr;                ///< panels · 64 column scales (0 past cols)
  std::int32_t* column_offsets = nullptr; ///< panels · 64 values of 128 · Σ_i q[i][j]
  void* storage = nullptr;                ///< the one allocation holding the three
  std::int64_t storage_bytes = 0;

  Packed() = default;
  Packed(const Packed&) = delete;
  Packed& operator=(const Packed&) = delete;
  ~Packed();  ///< frees the allocation
};

namespace detail {

constexpr std::int64_t kInt8PanelCols = 64;
constexpr std::int64_t kInt8GroupBytes = 4 * kInt8PanelCols;
/// The largest inner dimension whose int32 sums cannot overflow (see above).
constexpr std::int64_t kInt8MaxInner = 65536;

enum class Int8Isa { portable, avx2, avx_vnni, avx512_vnni, amx };

/// Quantized rows of activations: row i at data + i·stride (stride = int8_rows_stride(groups)), each
/// value q + 128 when `offset` (VNNI kernels) else q; scale[i] its row scale.
struct Int8Rows {
  const std::uint8_t* data;
  std::int64_t stride;
  const float* scale;
  bool offset;
};

/// One family's register kernel: acc[i][j] (+)= Σ_g a_i · b_j over the `groups` four-row groups
/// of one packed panel, for i < rows (any count) and all 64 columns j; acc rows are 64 int32
/// apart, 64-byte aligned; `first` starts the sums at zero instead of reading acc.
using Int8TileKernel = void (*)(std::int64_t rows, std::int64_t groups, const std::uint8_t* a, std::int64_t lda,
                                const std::int8_t* panel, std::int32_t* acc, bool first);

/// Whether a family is compiled in and this CPU runs it; its name; the active one.
bool int8_isa_supported(Int8Isa isa) noexcept;
const char* int8_isa_name(Int8Isa isa) noexcept;
Int8Isa active_int8_isa() noexcept;
void set_active_int8_isa(Int8Isa isa) noexcept;
/// Whether the family takes its activations as q + 128.
inline bool int8_isa_offsets_activations(Int8Isa isa) noexcept {
  return isa == Int8Isa::avx_vnni || isa == Int8Isa::avx512_vnni || isa == Int8Isa::amx;
}

/// The tile kernels of each family.
void int8_tile_portable(std::int64_t rows, std::int64_t groups, const std::uint8_t* a, std::int64_t lda,
                    const std::int8_t* panel, std::int32_t* acc, bool first);
#if defined(__x86_64__) && defined(__GNUC__)
#define SKETCHCORE_INT8_X86 1
void int8_tile_avx2(std::int64_t rows, std::int64_t groups, const std::uint8_t* a, std::int64_t lda,
                    const std::int8_t* panel, std::int32_t* acc, bool first);
void int8_tile_avx_vnni(std::int64_t rows, std::int64_t groups, const std::uint8_t* a, std::int64_t lda,
                    const std::int8_t* panel, std::int32_t* acc, bool first);
void int8_tile_avx512_vnni(std::int64_t rows, std::int64_t groups, const std::uint8_t* a, std::int64_t lda,
                    const std::int8_t* panel, std::int32_t* acc, bool first);
/// The AMX-INT8 kernel (cpu/int8_kernels_amx.cpp): loads this thread's tile configuration when
/// it needs another; int8_amx_release frees the tiles (called at the end of each worker's chunk).
void int8_tile_amx(std::int64_t rows, std::int64_t groups, const std::uint8_t* a, std::int64_t lda,
                   const std::int8_t* panel, std::int32_t* acc, bool first);
void int8_amx_release() noexcept;
/// AMX-INT8 in the CPU (CPUID), AVX-512 VNNI beside it (tails), and the process granted the
/// tile state by Linux (arch_prctl, asked once per process).
bool int8_amx_supported() noexcept;
/// Quantizes one contiguous row as quantize_rows_int8 does (AVX-512); returns its scale.
float quantize_row_avx512(const float* x, std::int64_t cols, std::int64_t padded, bool offset, std::uint8_t* dst);
/// Quantizes one contiguous row as quantize_rows_int8 does (AVX2, the same bits); returns its scale.
float quantize_row_avx2(const float* x, std::int64_t cols, std::int64_t padded, bool offset, std::uint8_t* dst);
/// The peak loops (int8 multiply-adds per second on the calling thread).
double int8_peak_avx512_vnni(std::int64_t iterations);
double int8_peak_avx_vnni(std::int64_t iterations);
/// Four TDPBUSD per iteration on tiles held in registers.
double int8_peak_amx(std::int64_t iterations);
#else
#define SKETCHCORE_INT8_X86 0
#endif

/// The exact power of two a row's values and maximum are multiplied by before 127 / max is taken:
/// 2^64 for a maximum below 2^-64 (where 127 / max would overflow for the smallest ones), else 1.
inline float int8_tiny_row_boost(float max_abs) noexcept { return max_abs < 0x1p-64f ? 0x1p64f : 1.0f; }

/// The row stride (bytes) of quantized activations for a factor of `groups` four-row groups:
/// 4·groups, plus 64 when that is a multiple of 256 (rows a power of two apart fall in the same
/// few L1 sets, which the 16-row AMX tile loads and the VNNI kernels' row sweeps would thrash).
inline std::int64_t int8_rows_stride(std::int64_t groups) noexcept {
  const std::int64_t bytes = 4 * groups;
  return bytes >= 256 && bytes % 256 == 0 ? bytes + 64 : bytes;
}

/// Quantizes `rows` rows of float32: row scale s = max|x|/127, q = clip(round_half_even(x · (127/max|x|)),
/// ±127) in float32 (0 for an all-zero row, a NaN scale for a row with a non-finite value); (row i at x + row_offset(i), `col_stride` apart, `cols`
/// values) into `dst` (rows `dst_stride` ≥ 4·⌈cols/4⌉ bytes apart, 4·⌈cols/4⌉ written, padding zero) and row scales, on the workers.
/// row_offsets null means row i at x + i·row_stride.
/// `isa` picks the vector code (the results are the same bits for every family).
void quantize_rows_int8(const float* x, const std::int64_t* row_offsets, std::int64_t row_stride,
                        std::int64_t col_stride, std::int64_t rows, std::int64_t cols, Int8Isa isa, std::uint8_t* dst,
                        std::int64_t dst_stride, float* scale, float scale_factor = 1.0f);

/// C (rows × b.cols, row stride ldc) = act(deq(a · b) + bias) with the family `isa`, tiled
/// over the workers; `bias` contiguous (b.cols values) or null.
/// Throws std::invalid_argument (naming `op`) when SKETCHCORE_INT8_ISA names no family (int8_matmul.cpp).
void check_int8_isa_environment(const char* op);

/// The CPU's packing of the int8 codes stored in `storage` (cpu/int8_pack.cpp).
std::shared_ptr<const Int8Factor::Packed> pack_int8_factor(const QuantizedFactor::Storage& storage);

/// The packing of the int8 factor `factor`, made on first use and kept by it (cpu/int8_pack.cpp).
const Int8Factor::Packed& int8_packing(const QuantizedFactor& factor);

void int8_gemm(const Int8Rows& a, std::int64_t rows, const Int8Factor::Packed& b, float* c, std::int64_t ldc,
               const float* bias, Activation act, Int8Isa isa);

}  // namespace detail
}  // namespace sketchcore
