// The bfloat16 GEMM of cpu/gemm_bf16.hpp on Intel AMX (TDPBF16PS, Sapphire Rapids on): one
// instruction multiplies a 16 × 32 bfloat16 tile of A by a 32 × 16 tile of B into a 16 × 16 tile
// of float32 sums, 8× the work of the VDPBF16PS kernel's (cpu/gemm_bf16.cpp) per instruction.
//
// Blocking as there (GotoBLAS): for each slab of kKc inner indices and kNc columns, B is packed
// once into panels of 32 columns of 32-bit pairs (cpu/gemm_bf16_pack.hpp) — a B tile is 16 pair
// rows × 16 columns of such a panel, 64 bytes a row, read with a stride of one panel row — its
// pair count padded with zero pairs to a multiple of 16. Tasks of kMc rows × kTileCols columns
// run on the workers; each multiplies 32 × 32 blocks of C with 2 A × 2 B → 4 C tiles, the C
// tiles kept across the whole slab, then stored and added into C with alpha and beta (alpha per
// slab, as the contract says). A is read in place when it is row-major, the slab a multiple of
// 32 and the task's rows a multiple of 32; else the task's rows are copied into a row-major
// buffer padded with zeros to 32 rows and a multiple of 32 indices (zeros, not whatever lies
// past the operand: 0 · inf would be NaN).
//
// TDPBF16PS treats subnormal inputs as zero and flushes subnormal results (like VDPBF16PS);
// products are exact and sums float32, so the results are the VDPBF16PS kernel's up to
// summation order. The tile configuration is loaded at the start of every worker's chunk and
// the tiles released at its end: LDTILECFG zeroes the tiles, and other AMX kernels (the int8
// GEMM) load configurations of their own on the same threads.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "cpu/amx_support.hpp"
#include "cpu/gemm_bf16.hpp"
#include "cpu/gemm_bf16_pack.hpp"
#include "detail/parallel.hpp"
#include "detail/scratch.hpp"

#if SKETCHCORE_GEMM_BF16
#include "cpu/x86_intrinsics.hpp"
#endif

namespace sketchcore::detail {

#if SKETCHCORE_GEMM_BF16

namespace {

#define SKETCHCORE_AMX_BF16_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512bf16")))

constexpr std::int64_t kPanel = 32;    // columns of a packed B panel (two B tiles)
constexpr std::int64_t kBlock = 32;    // rows of a block of C (two A tiles)
constexpr std::int64_t kStepPairs = 16;  // pairs of one tile step (32 inner indices)
constexpr std::int64_t kKc = 512;      // inner indices per slab (alpha's slab in gemm_bf16.hpp)
constexpr std::int64_t kNc = 1024;     // columns per packed B slab
constexpr std::int64_t kMc = 64;       // rows per task
constexpr std::int64_t kTileCols = 256;  // columns per task

std::int64_t round_up(std::int64_t value, std::int64_t step) { return (value + step - 1) / step * step; }

SKETCHCORE_AMX_BF16_TARGET void load_tile_config() {
  AmxTileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = 16;
    config.colsb[t] = 64;
  }
  // GCC 12 does not see that LDTILECFG reads the structure and drops the stores above as dead
  // (the tiles then stay unconfigured and the first tile instruction faults): a compiler barrier.
  asm volatile("" : : "r"(&config) : "memory");
  _tile_loadconfig(&config);
}

SKETCHCORE_AMX_BF16_TARGET void release_tiles() { _tile_release(); }

/// sums (32 × 32 float32, rows `ld_sums` apart) = Σ over `steps` steps of 32 inner indices of
/// the 32 rows of A at `a` (bfloat16, `lda` elements apart, row-major) times the B panel at `b`
/// (16 pair rows of 32 columns per step). Tiles 0–3: C (top left, top right, bottom left, bottom right),
/// 4–5: A (top, bottom), 6–7: B (left, right).
SKETCHCORE_AMX_BF16_TARGET void multiply_block(std::int64_t steps, const std::uint16_t* a, std::int64_t lda,
                                               const std::uint32_t* b, float* sums, std::int64_t ld_sums) {
  const std::int64_t a_stride = lda * 2, b_stride = kPanel * 4;
  const std::uint16_t* a_bottom = a + 16 * lda;
  // GCC's TILELOADD declares no memory it reads: this barrier keeps every store to the operands
  // (the copied rows, the packed panel) before the loads below, should this function be inlined.
  asm volatile("" : : : "memory");
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (std::int64_t s = 0; s < steps; ++s) {
    const std::uint32_t* bs = b + s * kStepPairs * kPanel;
    _tile_loadd(4, a + s * 2 * kStepPairs, a_stride);
    _tile_loadd(6, bs, b_stride);
    _tile_loadd(7, bs + 16, b_stride);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_loadd(5, a_bottom + s * 2 * kStepPairs, a_stride);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, sums, ld_sums * 4);
  _tile_stored(1, sums + 16, ld_sums * 4);
  _tile_stored(2, sums + 16 * ld_sums, ld_sums * 4);
  _tile_stored(3, sums + 16 * ld_sums + 16, ld_sums * 4);
}

/// The mask of the first `count` of 16 lanes (all for count ≥ 16, none for count ≤ 0).
__mmask16 lanes(std::int64_t count) {
  return static_cast<__mmask16>((std::uint32_t{1} << std::clamp<std::int64_t>(count, 0, 16)) - 1);
}

/// C[i][j] = alpha · sums[i][j] + beta · C[i][j] for i < rows, j < cols (C not read when beta = 0).
SKETCHCORE_AMX_BF16_TARGET void add_block(const float* sums, float* c, std::int64_t ldc, std::int64_t rows,
                                          std::int64_t cols, float alpha, float beta) {
  const __mmask16 m0 = lanes(cols), m1 = lanes(cols - 16);
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  for (std::int64_t i = 0; i < rows; ++i) {
    float* ci = c + i * ldc;
    __m512 r0 = _mm512_mul_ps(_mm512_loadu_ps(sums + i * kBlock), va);
    __m512 r1 = _mm512_mul_ps(_mm512_loadu_ps(sums + i * kBlock + 16), va);
    if (beta != 0.0f) {
      r0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, ci), r0);
      r1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, ci + 16), r1);
    }
    _mm512_mask_storeu_ps(ci, m0, r0);
    _mm512_mask_storeu_ps(ci + 16, m1, r1);
  }
}

/// dst (rows_padded × width, row-major) = A's rows [m0, m0 + mb), inner indices [k0, k0 + kb),
/// zero past mb rows and past kb indices.
void copy_rows(const Bf16Operand& a, std::int64_t m0, std::int64_t mb, std::int64_t k0, std::int64_t kb,
               std::int64_t rows_padded, std::int64_t width, std::uint16_t* dst) {
  std::fill(dst, dst + rows_padded * width, std::uint16_t{0});
  if (!a.transposed) {
    for (std::int64_t i = 0; i < mb; ++i) std::memcpy(dst + i * width, a.data + (m0 + i) * a.ld + k0, kb * 2);
    return;
  }
  for (std::int64_t kk = 0; kk < kb; ++kk) {  // the inner index runs down A's columns
    const std::uint16_t* column = a.data + (k0 + kk) * a.ld + m0;
    for (std::int64_t i = 0; i < mb; ++i) dst[i * width + kk] = column[i];
  }
}

/// One slab of inner indices [k0, k0 + kb) for the columns [j0, j0 + nb) of C, B packed.
struct Slab {
  std::int64_t m, j0, nb, k0, kb, steps;
  const std::uint32_t* b_packed;
  float alpha, beta;
};

/// Tasks [t0, t1) of a slab (row-major order: consecutive tasks share their rows of A).
void run_tasks(const Slab& s, const Bf16Operand& a, float* c, std::int64_t ldc, std::int64_t t0, std::int64_t t1) {
  const std::int64_t col_tasks = (s.nb + kTileCols - 1) / kTileCols, panels = (s.nb + kPanel - 1) / kPanel;
  const std::int64_t width = s.steps * 2 * kStepPairs;  // padded inner indices
  // Allocated before the tiles are configured, so that a failure leaves no tile state behind.
  Scratch<std::uint16_t> a_copy;
  if (a.transposed || s.kb != width || (s.m % kMc) % kBlock != 0) a_copy.allocate(kMc * width);
  alignas(64) float sums[kBlock * kBlock];
  std::int64_t copied_row_task = -1;
  load_tile_config();
  for (std::int64_t t = t0; t < t1; ++t) {
    const std::int64_t m0 = (t / col_tasks) * kMc, mb = std::min(kMc, s.m - m0);
    const std::uint16_t* rows = a.data + m0 * a.ld + s.k0;
    std::int64_t lda = a.ld;
    if (a.transposed || s.kb != width || mb % kBlock != 0) {
      if (t / col_tasks != copied_row_task) {
        copied_row_task = t / col_tasks;
        copy_rows(a, m0, mb, s.k0, s.kb, round_up(mb, kBlock), width, a_copy.data());
      }
      rows = a_copy.data();
      lda = width;
    }
    const std::int64_t first_panel = (t % col_tasks) * (kTileCols / kPanel);
    const std::int64_t last_panel = std::min(panels, first_panel + kTileCols / kPanel);
    for (std::int64_t p = first_panel; p < last_panel; ++p) {
      const std::uint32_t* panel = s.b_packed + p * s.steps * kStepPairs * kPanel;
      const std::int64_t cols = std::min(kPanel, s.nb - p * kPanel);
      for (std::int64_t i = 0; i < mb; i += kBlock) {
        float* block = c + (m0 + i) * ldc + s.j0 + p * kPanel;
        if (s.alpha == 1.0f && s.beta == 0.0f && cols == kPanel && mb - i >= kBlock) {
          multiply_block(s.steps, rows + i * lda, lda, panel, block, ldc);  // C = the sums: stored as they are
          continue;
        }
        multiply_block(s.steps, rows + i * lda, lda, panel, sums, kBlock);
        add_block(sums, block, ldc, std::min(kBlock, mb - i), cols, s.alpha, s.beta);
      }
    }
  }
  release_tiles();
}

#undef SKETCHCORE_AMX_BF16_TARGET

}  // namespace

bool gemm_bf16_amx_enabled() noexcept {
  static const bool enabled = [] {
    const char* setting = std::getenv("SKETCHCORE_BF16_AMX");  // "0" keeps the VDPBF16PS kernel
    if (setting != nullptr && std::strcmp(setting, "0") == 0) return false;
    return gemm_bf16_available() && amx_bf16_supported();
  }();
  return enabled;
}

void gemm_bf16_amx(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const Bf16Operand& a,
                   const Bf16Operand& b, float* c, std::int64_t ldc, float beta) {
  const std::int64_t slab_cols = std::min(kNc, n);
  const std::int64_t max_steps = round_up(std::min(kKc, k), 2 * kStepPairs) / (2 * kStepPairs);
  Scratch<std::uint32_t> b_packed(max_steps * kStepPairs * round_up(slab_cols, kPanel));
  for (std::int64_t j0 = 0; j0 < n; j0 += kNc) {
    const std::int64_t nb = std::min(kNc, n - j0), panels = (nb + kPanel - 1) / kPanel;
    const std::int64_t tasks = ((m + kMc - 1) / kMc) * ((nb + kTileCols - 1) / kTileCols);
    for (std::int64_t k0 = 0; k0 < k; k0 += kKc) {
      const std::int64_t kb = std::min(kKc, k - k0), steps = round_up(kb, 2 * kStepPairs) / (2 * kStepPairs);
      const std::int64_t pairs = (kb + 1) / 2, panel_size = steps * kStepPairs * kPanel;
      parallel_for(panels, 4, [&](std::int64_t p0, std::int64_t p1) {
        for (std::int64_t p = p0; p < p1; ++p) {
          std::uint32_t* panel = b_packed.data() + p * panel_size;
          pack_bf16_pairs(b.data, b.ld, b.transposed, j0 + p * kPanel, std::min(kPanel, nb - p * kPanel), k0, kb,
                          static_cast<int>(kPanel), panel);
          std::fill(panel + pairs * kPanel, panel + panel_size, std::uint32_t{0});  // the last step's zero pairs
        }
      });
      const Slab slab{m, j0, nb, k0, kb, steps, b_packed.data(), alpha, k0 == 0 ? beta : 1.0f};
      parallel_for(tasks, 1, [&](std::int64_t t0, std::int64_t t1) { run_tasks(slab, a, c, ldc, t0, t1); });
    }
  }
}

#else

bool gemm_bf16_amx_enabled() noexcept { return false; }

void gemm_bf16_amx(std::int64_t, std::int64_t, std::int64_t, float, const Bf16Operand&, const Bf16Operand&, float*,
                   std::int64_t, float) {
  throw std::logic_error("sketchcore: gemm_bf16_amx called where gemm_bf16_amx_enabled() is false");
}

#endif

}  // namespace sketchcore::detail
