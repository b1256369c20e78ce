// The bfloat16 GEMM of cpu/gemm_bf16.hpp: gemm_bf16 chooses the AMX kernel (cpu/gemm_bf16_amx.cpp)
// where gemm_bf16_amx_enabled(), else the VDPBF16PS kernel here, blocked the usual way
// (GotoBLAS): for each slab of
// kKc inner indices and kNc columns, B is packed once into panels of kNr columns, then tiles of
// kMc rows × kTileCols columns run on the workers, multiplying kMr rows of A at a time into C
// with an 8 × 32 register kernel. Row-major A (x and dL/dy, the large operands of the sketched
// GEMM) is read in place; other layouts are packed per tile into micro-panels of kMr rows.
//
// VDPBF16PS multiplies pairs: lane j of a packed B panel holds (B[2q][j], B[2q+1][j]) and a
// packed A entry (A[i][2q], A[i][2q+1]), broadcast to all lanes, so one instruction adds both
// products of pair q to the 16 sums of row i. Packing therefore interleaves two rows (when the
// inner index runs across rows in memory) or copies 32-bit pairs (when it runs along a row);
// an odd last index is paired with zero.
//
// bench/test_bench_half.py -k native_bf16_product times X·Sp at 2048 × 1024 by 1024 × 128 through
// this kernel against the float32 call, MKL's own gemm_bf16bf16f32 (which torch's wheel exports;
// on AMD CPUs it does not use VDPBF16PS) and torch's oneDNN bf16 matmul; the results are in
// bench/results/cpu-bf16-native-2026-11-24.txt (2.1–2.5×, 2.5–2.7× and 0.76–0.77×).
#include "cpu/gemm_bf16.hpp"

#include "cpu/gemm_bf16_pack.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "detail/parallel.hpp"
#include "detail/scratch.hpp"

#if SKETCHCORE_GEMM_BF16
#include "cpu/x86_intrinsics.hpp"
#endif

namespace sketchcore::detail {

#if SKETCHCORE_GEMM_BF16

namespace {

#define SKETCHCORE_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

constexpr int kMr = 8;             // rows of the register kernel (8 × 2 accumulators)
constexpr int kNr = 32;            // columns of the register kernel (two 16-lane vectors)
constexpr std::int64_t kKc = 512;  // inner indices per slab: an A micro-panel of 8 KiB stays in L1
constexpr std::int64_t kNc = 1024;  // columns per packed B slab (1 MiB of pairs)
constexpr std::int64_t kMc = 64;    // rows per tile (a 64 KiB block of A)
constexpr std::int64_t kTileCols = 256;

std::int64_t pairs_of(std::int64_t count) { return (count + 1) / 2; }

/// The mask of the first `count` of 16 lanes (all for count ≥ 16, none for count ≤ 0).
__mmask16 lanes(std::int64_t count) {
  return static_cast<__mmask16>((std::uint32_t{1} << std::clamp<std::int64_t>(count, 0, 16)) - 1);
}

/// Where the register kernel reads the pairs of its kMr rows of A: pair q of row i at
/// row[i] + q·pair_step (std::uint16_t units): a packed micro-panel (row[i] = panel + 2i,
/// pair_step = 2·kMr), or A itself when its rows hold the inner index contiguously (row[i] the
/// row's first index of the slab, pair_step = 2), which spares packing the larger operand.
struct RowsOfA {
  const std::uint16_t* row[kMr];
  std::int64_t pair_step;
};

/// C[i][j] = alpha · Σ_q A-pair(i, q) · b[q][j] + beta · C[i][j] for i < rows, j < cols, over
/// `pairs` pairs (C not read when beta = 0).
SKETCHCORE_BF16_TARGET void multiply_tile(std::int64_t pairs, const RowsOfA& a, const std::uint32_t* b, float* c,
                                          std::int64_t ldc, int rows, int cols, float alpha, float beta) {
  __m512 sum[kMr][2];
  for (auto& row : sum) row[0] = row[1] = _mm512_setzero_ps();
  for (std::int64_t q = 0; q < pairs; ++q) {
    const auto b0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + q * kNr));
    const auto b1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + q * kNr + 16));
    for (int i = 0; i < kMr; ++i) {
      std::uint32_t pair;
      std::memcpy(&pair, a.row[i] + q * a.pair_step, sizeof pair);
      const auto ai = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(pair)));
      sum[i][0] = _mm512_dpbf16_ps(sum[i][0], ai, b0);
      sum[i][1] = _mm512_dpbf16_ps(sum[i][1], ai, b1);
    }
  }
  const __mmask16 m0 = lanes(cols), m1 = lanes(cols - 16);
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  for (int i = 0; i < rows; ++i) {
    float* ci = c + i * ldc;
    __m512 r0 = _mm512_mul_ps(sum[i][0], va), r1 = _mm512_mul_ps(sum[i][1], va);
    if (beta != 0.0f) {
      r0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, ci), r0);
      r1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, ci + 16), r1);
    }
    _mm512_mask_storeu_ps(ci, m0, r0);
    _mm512_mask_storeu_ps(ci + 16, m1, r1);
  }
}

/// C = beta · C (k = 0: the empty sum).
void scale_rows(std::int64_t m, std::int64_t n, float* c, std::int64_t ldc, float beta) {
  for (std::int64_t i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    for (std::int64_t j = 0; j < n; ++j) row[j] = beta == 0.0f ? 0.0f : beta * row[j];
  }
}

/// Column sums of bfloat16 rows, 64 columns (four vectors of sums) at a time.
SKETCHCORE_BF16_TARGET void column_sums(const std::uint16_t* src, std::int64_t ld, std::int64_t rows, std::int64_t first,
                                        std::int64_t last, float* sums, bool accumulate) {
  for (std::int64_t j0 = first; j0 < last; j0 += 64) {
    __mmask16 mask[4];
    __m512 sum[4];
    for (int v = 0; v < 4; ++v) {
      mask[v] = lanes(last - (j0 + 16 * v));
      sum[v] = accumulate ? _mm512_maskz_loadu_ps(mask[v], sums + j0 + 16 * v) : _mm512_setzero_ps();
    }
    for (std::int64_t i = 0; i < rows; ++i) {
      const std::uint16_t* row = src + i * ld + j0;
      for (int v = 0; v < 4; ++v) {  // bfloat16 → float32: the bits moved to the high half
        const __m512i bits = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask[v], row + 16 * v));
        sum[v] = _mm512_add_ps(sum[v], _mm512_castsi512_ps(_mm512_slli_epi32(bits, 16)));
      }
    }
    for (int v = 0; v < 4; ++v) _mm512_mask_storeu_ps(sums + j0 + 16 * v, mask[v], sum[v]);
  }
}

#undef SKETCHCORE_BF16_TARGET

}  // namespace

void pack_bf16_pairs(const std::uint16_t* base, std::int64_t ld, bool inner_contiguous, std::int64_t first,
                     std::int64_t count, std::int64_t k0, std::int64_t kb, int width, std::uint32_t* dst) {
  const std::int64_t whole = kb / 2;
  const bool odd = (kb & 1) != 0;
  if (inner_contiguous) {
    for (std::int64_t j = 0; j < count; ++j) {
      const std::uint16_t* row = base + (first + j) * ld + k0;
      for (std::int64_t q = 0; q < whole; ++q) std::memcpy(&dst[q * width + j], row + 2 * q, sizeof(std::uint32_t));
      if (odd) dst[whole * width + j] = row[2 * whole];
    }
  } else {
    for (std::int64_t q = 0; q < whole; ++q) {
      const std::uint16_t* low = base + (k0 + 2 * q) * ld + first;
      const std::uint16_t* high = low + ld;
      std::uint32_t* out = dst + q * width;
      for (std::int64_t j = 0; j < count; ++j) out[j] = std::uint32_t{low[j]} | (std::uint32_t{high[j]} << 16);
    }
    if (odd) {
      const std::uint16_t* low = base + (k0 + 2 * whole) * ld + first;
      for (std::int64_t j = 0; j < count; ++j) dst[whole * width + j] = low[j];
    }
  }
  for (std::int64_t q = 0; count < width && q < (kb + 1) / 2; ++q) {
    std::fill(dst + q * width + count, dst + (q + 1) * width, std::uint32_t{0});
  }
}

void bfloat16_column_sums(const std::uint16_t* src, std::int64_t ld, std::int64_t rows, std::int64_t cols, float* sums,
                          bool accumulate) {
  constexpr std::int64_t kBlock = 256;  // columns per task
  parallel_for((cols + kBlock - 1) / kBlock, 1, [&](std::int64_t b0, std::int64_t b1) {
    column_sums(src, ld, rows, b0 * kBlock, std::min(cols, b1 * kBlock), sums, accumulate);
  });
}

bool gemm_bf16_available() noexcept {
  static const bool available = [] {
    const char* setting = std::getenv("SKETCHCORE_BF16_GEMM");  // "0" turns the native GEMM off
    if (setting != nullptr && std::strcmp(setting, "0") == 0) return false;
    return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
  }();
  return available;
}

void gemm_bf16(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const Bf16Operand& a,
               const Bf16Operand& b, float* c, std::int64_t ldc, float beta) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) return scale_rows(m, n, c, ldc, beta);
  if (gemm_bf16_amx_enabled()) return gemm_bf16_amx(m, n, k, alpha, a, b, c, ldc, beta);
  gemm_bf16_vdpbf16ps(m, n, k, alpha, a, b, c, ldc, beta);
}

void gemm_bf16_vdpbf16ps(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const Bf16Operand& a,
                         const Bf16Operand& b, float* c, std::int64_t ldc, float beta) {
  const std::int64_t slab_cols = std::min(kNc, n);
  Scratch<std::uint32_t> b_packed(pairs_of(std::min(kKc, k)) * ((slab_cols + kNr - 1) / kNr) * kNr);
  for (std::int64_t j0 = 0; j0 < n; j0 += kNc) {
    const std::int64_t nb = std::min(kNc, n - j0), panels = (nb + kNr - 1) / kNr;
    const std::int64_t col_tiles = (nb + kTileCols - 1) / kTileCols, row_tiles = (m + kMc - 1) / kMc;
    for (std::int64_t k0 = 0; k0 < k; k0 += kKc) {
      const std::int64_t kb = std::min(kKc, k - k0), pairs = pairs_of(kb);
      const float slab_beta = k0 == 0 ? beta : 1.0f;  // later slabs add to the first's sums
      parallel_for(panels, 4, [&](std::int64_t p0, std::int64_t p1) {
        for (std::int64_t p = p0; p < p1; ++p) {
          pack_bf16_pairs(b.data, b.ld, b.transposed, j0 + p * kNr, std::min<std::int64_t>(kNr, nb - p * kNr), k0, kb, kNr,
                     b_packed.data() + p * pairs * kNr);
        }
      });
      // Tiles in row-major order, so that a worker's consecutive tiles share their rows of A.
      parallel_for(row_tiles * col_tiles, 1, [&](std::int64_t t0, std::int64_t t1) {
        // Row-major A with an even slab is read in place; else its rows are packed per tile.
        const bool a_in_place = !a.transposed && kb % 2 == 0;
        Scratch<std::uint32_t> a_packed;
        if (!a_in_place) a_packed.allocate(pairs * kMc);
        std::int64_t packed_tile_row = -1;
        for (std::int64_t t = t0; t < t1; ++t) {
          const std::int64_t m0 = (t / col_tiles) * kMc, mb = std::min(kMc, m - m0);
          if (!a_in_place && t / col_tiles != packed_tile_row) {
            packed_tile_row = t / col_tiles;
            for (std::int64_t i = 0; i < mb; i += kMr) {
              pack_bf16_pairs(a.data, a.ld, !a.transposed, m0 + i, std::min<std::int64_t>(kMr, mb - i), k0, kb, kMr,
                         a_packed.data() + (i / kMr) * pairs * kMr);
            }
          }
          const std::int64_t first_panel = (t % col_tiles) * (kTileCols / kNr);
          const std::int64_t last_panel = std::min(panels, first_panel + kTileCols / kNr);
          for (std::int64_t i = 0; i < mb; i += kMr) {
            const int rows = static_cast<int>(std::min<std::int64_t>(kMr, mb - i));
            RowsOfA rows_of_a{};
            if (a_in_place) {
              // Rows past m (the last micro-panel) repeat the last row: computed, never stored.
              for (int r = 0; r < kMr; ++r) rows_of_a.row[r] = a.data + (m0 + i + std::min(r, rows - 1)) * a.ld + k0;
              rows_of_a.pair_step = 2;
            } else {
              const auto* panel = reinterpret_cast<const std::uint16_t*>(a_packed.data() + (i / kMr) * pairs * kMr);
              for (int r = 0; r < kMr; ++r) rows_of_a.row[r] = panel + 2 * r;
              rows_of_a.pair_step = 2 * kMr;
            }
            for (std::int64_t p = first_panel; p < last_panel; ++p) {
              const int cols = static_cast<int>(std::min<std::int64_t>(kNr, nb - p * kNr));
              multiply_tile(pairs, rows_of_a, b_packed.data() + p * pairs * kNr, c + (m0 + i) * ldc + j0 + p * kNr, ldc, rows,
                            cols, alpha, slab_beta);
            }
          }
        }
      });
    }
  }
}

#else

bool gemm_bf16_available() noexcept { return false; }

void gemm_bf16(std::int64_t, std::int64_t, std::int64_t, float, const Bf16Operand&, const Bf16Operand&, float*,
               std::int64_t, float) {
  throw std::logic_error("sketchcore: gemm_bf16 called where gemm_bf16_available() is false");
}

void gemm_bf16_vdpbf16ps(std::int64_t, std::int64_t, std::int64_t, float, const Bf16Operand&, const Bf16Operand&,
                         float*, std::int64_t, float) {
  throw std::logic_error("sketchcore: gemm_bf16_vdpbf16ps called where gemm_bf16_available() is false");
}

void bfloat16_column_sums(const std::uint16_t*, std::int64_t, std::int64_t, std::int64_t, float*, bool) {
  throw std::logic_error("sketchcore: bfloat16_column_sums called where gemm_bf16_available() is false");
}

#endif

}  // namespace sketchcore::detail
