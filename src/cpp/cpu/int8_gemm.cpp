// The driver of the int8 GEMMs (cpu/int8_gemm.hpp): which kernel family runs, the per-row
// quantization of activations, the portable kernel, and the tiling over the workers.
//
// Tiles are (up to kTileRows rows) × (one 64-column panel), row blocks outermost, so a worker's
// contiguous chunk of tiles walks every panel of a row block while those rows stay in L2; the
// inner dimension is blocked so that the panel's block stays in L1 (int32 sums kept per tile).
// The AMX tiles run the whole inner dimension at once (the sums stay in tile registers) and are
// walked in bands of rows that fit in L2, panel by panel within a band (kAmxBandBytes);
// a decode call (a few rows) splits the panels between the workers, each streaming its part of
// the packed factor once.
#include "cpu/int8_gemm.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>

#include "cpu/epilogue_kernels.hpp"
#include "cpu/target_clones.hpp"
#include "detail/parallel.hpp"

namespace sketchcore::detail {

namespace {

constexpr std::int64_t kTileRows = 48;
/// Four-row groups per block of the inner dimension: 16 KiB of a panel, which stays in L1 with
/// the tile's 48 rows of 256 activations.
constexpr std::int64_t kBlockGroups = 64;
/// Multiply-adds below which a chunk is not worth waking a worker for.
constexpr std::int64_t kMinParallelMacs = std::int64_t{1} << 18;
/// The AMX kernel's tiles: kAmxTileRows rows (two pairs of 16-row A tiles) × one panel, over the
/// whole inner dimension in one kernel call, so each 32 × 32 block of sums stays in the tile
/// registers from the first group to the last (blocks of 64 groups, each loading and storing the
/// sums, measured 1–12 % slower on Sapphire Rapids, one thread, 512 × 4096 → 1024 → 4096).
constexpr std::int64_t kAmxTileRows = 64;
/// A packed factor larger than this is walked by the AMX tiles in bands of rows whose quantized
/// activations fit in this many bytes (half of Sapphire Rapids' 2 MiB L2, the rest for the
/// panel): within a band, panel by panel, every row block of the band against one panel, so the
/// panel is read from memory once per band and the band's rows come from L2 (row blocks
/// outermost read the whole factor once per 64 rows; for a factor that L2 holds they are faster:
/// 0.9 of the bands' time at 512 × 1024 → 256 → 1024).
constexpr std::int64_t kAmxBandBytes = std::int64_t{1} << 20;
/// Fewer rows than this run the AVX-512 VNNI kernel instead (the same sums): a 16-row AMX tile
/// mostly empty. Measured on Sapphire Rapids, one thread, 1024→256→1024 and 4096→1024→4096:
/// VNNI/AMX time 0.78 and 0.96 at 1 row, 1.00 and 0.99 at 4, 1.49 and 1.12 at 8, 1.87 and 1.57 at 16.
constexpr std::int64_t kAmxMinRows = 8;
constexpr std::int64_t kMaxTileRows = std::max(kTileRows, kAmxTileRows);

Int8Isa best_supported(Int8Isa cap) noexcept {
  for (Int8Isa isa : {Int8Isa::amx, Int8Isa::avx512_vnni, Int8Isa::avx_vnni, Int8Isa::avx2, Int8Isa::portable}) {
    if (static_cast<int>(isa) <= static_cast<int>(cap) && int8_isa_supported(isa)) return isa;
  }
  return Int8Isa::portable;
}

Int8Isa initial_isa() noexcept {
  Int8Isa cap = Int8Isa::amx;
  if (const char* env = std::getenv("SKETCHCORE_INT8_ISA")) {
    for (Int8Isa isa : {Int8Isa::portable, Int8Isa::avx2, Int8Isa::avx_vnni, Int8Isa::avx512_vnni, Int8Isa::amx}) {
      if (std::string_view(env) == int8_isa_name(isa)) cap = isa;
    }
  }
  return best_supported(cap);
}

std::atomic<Int8Isa>& active() noexcept {
  static std::atomic<Int8Isa> isa{initial_isa()};
  return isa;
}

Int8TileKernel kernel_of(Int8Isa isa) noexcept {
  switch (isa) {
#if SKETCHCORE_INT8_X86
    case Int8Isa::amx: return int8_tile_amx;
    case Int8Isa::avx512_vnni: return int8_tile_avx512_vnni;
    case Int8Isa::avx_vnni: return int8_tile_avx_vnni;
    case Int8Isa::avx2: return int8_tile_avx2;
#endif
    default: return int8_tile_portable;
  }
}

/// Quantizes one row; returns its scale (NaN for a row with a non-finite value).
float quantize_row(const float* x, std::int64_t col_stride, std::int64_t cols, std::int64_t padded, bool offset,
                   std::uint8_t* dst) {
  float max_abs = 0.0f;
  bool finite = true;  // std::max drops NaNs, so they are looked for separately
  for (std::int64_t j = 0; j < cols; ++j) {
    const float a = std::fabs(x[j * col_stride]);
    max_abs = std::max(max_abs, a);
    finite &= a <= std::numeric_limits<float>::max();
  }
  const std::uint8_t zero = offset ? 128 : 0;
  if (!finite || max_abs == 0.0f) {
    std::memset(dst, zero, static_cast<std::size_t>(padded));
    return finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
  }
  // A product per value, not a division. Below 2^-64 the values and the maximum are first scaled
  // by 2^64 (exactly): 127 / max overflows for a maximum under about 3.7e-37, and 0 · inf is NaN.
  const float boost = int8_tiny_row_boost(max_abs);
  const float inverse = 127.0f / (max_abs * boost);
  // 1.5 · 2^23 added and taken away rounds a |value| ≤ 127 to an integer, half to even, in the
  // default rounding mode (std::nearbyint is a libm call that saves the floating-point state).
  constexpr float kRound = 12582912.0f;
  for (std::int64_t j = 0; j < cols; ++j) {
    const float clamped = std::min(127.0f, std::max(-127.0f, x[j * col_stride] * boost * inverse));
    const float q = (clamped + kRound) - kRound;
    dst[j] = static_cast<std::uint8_t>(static_cast<std::int32_t>(q) + zero);
  }
  std::memset(dst + cols, zero, static_cast<std::size_t>(padded - cols));
  return max_abs / 127.0f;
}

/// C[i][j] = float(acc[i][j] − offsets[j]) · (row_scale[i] · col_scale[j]) for i < rows, j < cols
/// (offsets null: none), vectorised by the compiler for each instruction set.
SKETCHCORE_CLONES void dequantize(const std::int32_t* acc, std::int64_t rows, std::int64_t cols,
                                  const std::int32_t* offsets, const float* row_scale, const float* col_scale, float* c,
                                  std::int64_t ldc) {
  static constexpr std::int32_t kNoOffsets[kInt8PanelCols] = {};
  if (!offsets) offsets = kNoOffsets;
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::int32_t* sums = acc + i * kInt8PanelCols;
    float* row = c + i * ldc;
    const float rs = row_scale[i];
    for (std::int64_t j = 0; j < cols; ++j) row[j] = static_cast<float>(sums[j] - offsets[j]) * (rs * col_scale[j]);
  }
}

}  // namespace

bool int8_isa_supported(Int8Isa isa) noexcept {
  switch (isa) {
    case Int8Isa::portable: return true;
#if SKETCHCORE_INT8_X86
    case Int8Isa::avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Int8Isa::avx_vnni: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avxvnni");
    case Int8Isa::avx512_vnni:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vnni");
    case Int8Isa::amx: return int8_amx_supported();
#endif
    default: return false;
  }
}

const char* int8_isa_name(Int8Isa isa) noexcept {
  switch (isa) {
    case Int8Isa::portable: return "portable";
    case Int8Isa::avx2: return "avx2";
    case Int8Isa::avx_vnni: return "avx_vnni";
    case Int8Isa::avx512_vnni: return "avx512_vnni";
    case Int8Isa::amx: return "amx";
  }
  return "?";
}

Int8Isa active_int8_isa() noexcept { return active().load(std::memory_order_relaxed); }

void set_active_int8_isa(Int8Isa isa) noexcept { active().store(isa, std::memory_order_relaxed); }

void int8_tile_portable(std::int64_t rows, std::int64_t groups, const std::uint8_t* a, std::int64_t lda,
                        const std::int8_t* panel, std::int32_t* acc, bool first) {
  for (std::int64_t i = 0; i < rows; ++i) {
    const auto* ai = reinterpret_cast<const std::int8_t*>(a + i * lda);  // signed activations
    std::int32_t* row = acc + i * kInt8PanelCols;
    for (std::int64_t j = 0; j < kInt8PanelCols; ++j) {
      std::int32_t sum = first ? 0 : row[j];
      for (std::int64_t g = 0; g < groups; ++g) {
        const std::int8_t* b = panel + g * kInt8GroupBytes + 4 * j;
        for (int t = 0; t < 4; ++t) sum += std::int32_t{ai[4 * g + t]} * std::int32_t{b[t]};
      }
      row[j] = sum;
    }
  }
}

void quantize_rows_int8(const float* x, const std::int64_t* row_offsets, std::int64_t row_stride,
                        std::int64_t col_stride, std::int64_t rows, std::int64_t cols, Int8Isa isa, std::uint8_t* dst,
                        std::int64_t dst_stride, float* scale, float scale_factor) {
  const bool offset = int8_isa_offsets_activations(isa);
  const bool contiguous = col_stride == 1 || cols <= 1;
  const bool vector = (isa == Int8Isa::avx512_vnni || isa == Int8Isa::amx) && contiguous;
  const bool vector256 = (isa == Int8Isa::avx2 || isa == Int8Isa::avx_vnni) && contiguous;
  const std::int64_t padded = 4 * ((cols + 3) / 4);
  const std::int64_t grain = std::max<std::int64_t>(1, (std::int64_t{1} << 16) / std::max<std::int64_t>(cols, 1));
  parallel_for(rows, grain, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t i = r0; i < r1; ++i) {
      const float* row = x + (row_offsets ? row_offsets[i] : i * row_stride);
#if SKETCHCORE_INT8_X86
      const float s = vector      ? quantize_row_avx512(row, cols, padded, offset, dst + i * dst_stride)
                      : vector256 ? quantize_row_avx2(row, cols, padded, offset, dst + i * dst_stride)
                                  : quantize_row(row, col_stride, cols, padded, offset, dst + i * dst_stride);
#else
      const float s = quantize_row(row, col_stride, cols, padded, offset, dst + i * dst_stride);
#endif
      scale[i] = s * scale_factor;
    }
  });
}

void int8_gemm(const Int8Rows& a, std::int64_t rows, const Int8Factor::Packed& b, float* c, std::int64_t ldc,
               const float* bias, Activation act, Int8Isa isa) {
  if (rows == 0 || b.cols == 0) return;
  // AMX works on 16-row tiles: below kAmxMinRows rows the tiles are mostly empty and the VNNI
  // kernel (same activations, same sums) is as fast or faster.
  if (isa == Int8Isa::amx && rows < kAmxMinRows) isa = Int8Isa::avx512_vnni;
  const Int8TileKernel kernel = kernel_of(isa);
  const bool amx = isa == Int8Isa::amx;
  const std::int64_t tile_rows = amx ? kAmxTileRows : kTileRows;
  const std::int64_t block_groups = amx ? std::max<std::int64_t>(b.groups, 1) : kBlockGroups;
  const std::int64_t row_blocks = (rows + tile_rows - 1) / tile_rows;
  // Row blocks per band (see kAmxBandBytes), for a factor larger than L2 can keep; otherwise (and
  // for the VNNI kernels) row blocks outermost (one band of one block: panel after panel of each
  // row block), whose output is written row block by row block.
  const bool banded = amx && b.panels * b.groups * kInt8GroupBytes > kAmxBandBytes;
  const std::int64_t band_blocks =
      banded ? std::clamp<std::int64_t>(kAmxBandBytes / (tile_rows * std::max<std::int64_t>(a.stride, 1)), 1, row_blocks)
          : 1;
  const std::int64_t tiles = row_blocks * b.panels;
  const std::int64_t macs_per_tile =
      std::min(rows, tile_rows) * kInt8PanelCols * std::max<std::int64_t>(4 * b.groups, 1);
  const std::int64_t grain = std::max<std::int64_t>(1, kMinParallelMacs / macs_per_tile);
  parallel_for(tiles, grain, [&](std::int64_t t0, std::int64_t t1) {
    alignas(64) std::int32_t acc[kMaxTileRows * kInt8PanelCols];
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t band = t / (band_blocks * b.panels), in_band = t % (band_blocks * b.panels);
      const std::int64_t band_size = std::min(band_blocks, row_blocks - band * band_blocks);
      const std::int64_t r0 = (band * band_blocks + in_band % band_size) * tile_rows, p = in_band / band_size;
      const std::int64_t nr = std::min(tile_rows, rows - r0);
      const std::int64_t j0 = p * kInt8PanelCols, nc = std::min(kInt8PanelCols, b.cols - j0);
      const std::int8_t* panel = b.values + p * b.groups * kInt8GroupBytes;
      if (b.groups == 0) std::fill(acc, acc + nr * kInt8PanelCols, 0);
      // Blocks of the inner dimension: the block of the panel stays in L1 while every row of the
      // tile passes over it.
      for (std::int64_t g0 = 0; g0 < b.groups; g0 += block_groups) {
        kernel(nr, std::min(block_groups, b.groups - g0), a.data + r0 * a.stride + 4 * g0, a.stride,
               panel + g0 * kInt8GroupBytes, acc, g0 == 0);
      }
      float* tile = c + r0 * ldc + j0;
      dequantize(acc, nr, nc, a.offset ? b.column_offsets + j0 : nullptr, a.scale + r0, b.scales + j0, tile, ldc);
      if (act != Activation::none || bias) {
        for (std::int64_t i = 0; i < nr; ++i) activation_forward_f32(act, tile + i * ldc, bias ? bias + j0 : nullptr, nc);
      }
    }
#if SKETCHCORE_INT8_X86
    if (amx) int8_amx_release();  // no tile state left to the worker (nor its configuration)
#endif
  });
}

}  // namespace sketchcore::detail
