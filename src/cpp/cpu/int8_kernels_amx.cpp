// The AMX-INT8 register kernel of cpu/int8_gemm.hpp and its peak loop. TDPBUSD multiplies a
// 16 × 64-byte tile of u8 activations (q + 128, as the VNNI kernels take them) by a 16 × 64-byte
// tile of s8 weights in VNNI order into a 16 × 16 tile of int32 sums, so the sums are those of
// VPDPBUSD, bit for bit, and the column offsets are removed as for the VNNI kernels.
//
// The packed factor needs no repacking: a B tile row is one four-row group of 16 columns (64
// bytes, column j's four values at 4j … 4j+3), which in a packed panel is the 64 bytes at offset
// 64·cb of the group's 256, so the B tile of column block cb over groups g … g+15 is a load of
// 16 rows 256 bytes apart. An A tile is 16 activation rows × 16 groups, rows lda apart.
//
// Register blocking: 2 A tiles × 2 B tiles → 4 C tiles (32 rows × 32 columns), the eight tiles
// of the architecture; a panel is two such column pairs. The last row pair of a call may have
// fewer rows (the tile configuration gives the A and C tiles of each half their row count);
// groups past the last multiple of 16 are added by the AVX-512 VNNI kernel (same int32 sums).
// The configuration is loaded per thread when its row counts change and released by
// int8_amx_release at the end of each worker's chunk (LDTILECFG zeroes the tiles; no state is
// kept between calls).
#include "cpu/int8_gemm.hpp"

#if SKETCHCORE_INT8_X86

#include <cpuid.h>

#include <chrono>
#include <cstring>

#include "cpu/amx_support.hpp"
#include "cpu/x86_intrinsics.hpp"

#define SKETCHCORE_AMX_TARGET __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw")))

namespace sketchcore::detail {

namespace {

constexpr std::int64_t kTileGroups = 16;       ///< four-row groups of one A / B tile (64 bytes)
constexpr std::int64_t kTileBytes = 64;        ///< bytes of a tile row
constexpr std::int64_t kAccStride = kInt8PanelCols * 4;  ///< bytes between acc rows

/// The row counts (top half, bottom half) of the loaded configuration of this thread, 0 none.
thread_local int loaded_config = 0;

/// Tiles 0–3: C (top × left, top × right, bottom × left, bottom × right), 4–5: A (top,
/// bottom), 6–7: B (left, right); `top` and `bottom` rows (1 … 16) in the two halves.
SKETCHCORE_AMX_TARGET void configure(int top, int bottom) {
  const int key = top * 32 + bottom;
  if (loaded_config == key) return;
  AmxTileConfig config;
  const int rows[8] = {top, top, bottom, bottom, top, bottom, kTileGroups, kTileGroups};
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = static_cast<std::uint8_t>(rows[t]);
    config.colsb[t] = kTileBytes;
  }
  // GCC's _tile_loadconfig tells the compiler it reads only the first bytes of its operand, so
  // without this barrier the row and column fields may be left unstored (seen once the function
  // was inlined into a template: LDTILECFG then faults on a zero column count).
  __asm__ volatile("" : : "r"(&config) : "memory");
  _tile_loadconfig(&config);
  loaded_config = key;
}

/// acc (32 rows, or 16 when !kBottom) × (32 columns from acc) (+)= a · B over `steps` steps of
/// 16 groups; `b` the panel at the pair's first column block.
template <bool kBottom>
SKETCHCORE_AMX_TARGET void column_pair(std::int64_t steps, const std::uint8_t* a, std::int64_t lda,
                                       const std::int8_t* b, std::int32_t* acc, bool first) {
  std::int32_t* bottom = acc + 16 * kInt8PanelCols;
  // The tile intrinsics are asm statements (one per statement). GCC's TILELOADD declares no
  // memory it reads, so this barrier keeps every store to acc, a and b before the loads below.
  __asm__ volatile("" : : : "memory");
  if (first) {
    _tile_zero(0);
    _tile_zero(1);
    if constexpr (kBottom) {
      _tile_zero(2);
      _tile_zero(3);
    }
  } else {
    _tile_loadd(0, acc, kAccStride);
    _tile_loadd(1, acc + 16, kAccStride);
    if constexpr (kBottom) {
      _tile_loadd(2, bottom, kAccStride);
      _tile_loadd(3, bottom + 16, kAccStride);
    }
  }
  for (std::int64_t s = 0; s < steps; ++s) {
    const std::uint8_t* as = a + s * kTileBytes;
    const std::int8_t* bs = b + s * kTileGroups * kInt8GroupBytes;
    _tile_loadd(4, as, lda);
    _tile_loadd(6, bs, kInt8GroupBytes);
    _tile_loadd(7, bs + kTileBytes, kInt8GroupBytes);
    _tile_dpbusd(0, 4, 6);
    _tile_dpbusd(1, 4, 7);
    if constexpr (kBottom) {
      _tile_loadd(5, as + 16 * lda, lda);
      _tile_dpbusd(2, 5, 6);
      _tile_dpbusd(3, 5, 7);
    }
  }
  _tile_stored(0, acc, kAccStride);
  _tile_stored(1, acc + 16, kAccStride);
  if constexpr (kBottom) {
    _tile_stored(2, bottom, kAccStride);
    _tile_stored(3, bottom + 16, kAccStride);
  }
}

SKETCHCORE_AMX_TARGET void amx_rows(std::int64_t rows, std::int64_t steps, const std::uint8_t* a, std::int64_t lda,
                                    const std::int8_t* panel, std::int32_t* acc, bool first) {
  for (std::int64_t i = 0; i < rows; i += 32) {
    const std::int64_t n = rows - i < 32 ? rows - i : 32;
    const int top = static_cast<int>(n < 16 ? n : 16), bottom = static_cast<int>(n - top);
    configure(top, bottom > 0 ? bottom : 1);
    for (std::int64_t cp = 0; cp < 2; ++cp) {
      const std::int8_t* b = panel + cp * 2 * kTileBytes;
      std::int32_t* c = acc + i * kInt8PanelCols + cp * 32;
      if (bottom > 0) {
        column_pair<true>(steps, a + i * lda, lda, b, c, first);
      } else {
        column_pair<false>(steps, a + i * lda, lda, b, c, first);
      }
    }
  }
}

}  // namespace

bool int8_amx_supported() noexcept {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  const bool tile = (edx >> 24) & 1u, int8 = (edx >> 25) & 1u;
  return tile && int8 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vnni") && amx_tiles_permitted();
}

void int8_tile_amx(std::int64_t rows, std::int64_t groups, const std::uint8_t* a, std::int64_t lda,
                   const std::int8_t* panel, std::int32_t* acc, bool first) {
  const std::int64_t steps = groups / kTileGroups, done = steps * kTileGroups;
  if (steps > 0) amx_rows(rows, steps, a, lda, panel, acc, first);
  if (done < groups) {
    int8_tile_avx512_vnni(rows, groups - done, a + 4 * done, lda, panel + done * kInt8GroupBytes, acc,
                          first && steps == 0);
  }
}

SKETCHCORE_AMX_TARGET void int8_amx_release() noexcept {
  if (loaded_config == 0) return;
  _tile_release();
  loaded_config = 0;
}

SKETCHCORE_AMX_TARGET double int8_peak_amx(std::int64_t iterations) {
  alignas(64) static const std::uint8_t ones[16 * kTileBytes] = {1};
  alignas(64) std::int32_t sink[16 * 16];
  configure(16, 16);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, ones, kTileBytes);
  _tile_loadd(5, ones, kTileBytes);
  _tile_loadd(6, ones, kTileBytes);
  _tile_loadd(7, ones, kTileBytes);
  const auto start = std::chrono::steady_clock::now();
  for (std::int64_t it = 0; it < iterations; ++it) {
    // Four independent TDPBUSD on the C tiles, operands held in tiles (no loads).
    _tile_dpbusd(0, 4, 6);
    _tile_dpbusd(1, 4, 7);
    _tile_dpbusd(2, 5, 6);
    _tile_dpbusd(3, 5, 7);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  _tile_stored(3, sink, 64);
  __asm__ volatile("" : : "r"(sink) : "memory");
  int8_amx_release();
  return seconds > 0 ? static_cast<double>(iterations) * 4.0 * 16.0 * 16.0 * 64.0 / seconds : 0.0;
}

}  // namespace sketchcore::detail

#endif  // SKETCHCORE_INT8_X86
