// The 256-bit int8 register kernels of cpu/int8_gemm.hpp and their peak loops, for CPUs
// without AVX-512 VNNI: each pass covers half a panel (32 columns, four ymm vectors of sums).
//  - AVX-VNNI (Alder Lake on, Zen 5): VPDPBUSD on ymm, u8 activations + 128 as in the AVX-512
//    kernel, 3 rows per pass (12 accumulators in 16 registers).
//  - AVX2: VPMADDUBSW would saturate u8 × s8 pair sums (255·127·2 > 32767), so activations stay
//    signed and the kernel multiplies |a| (≤ 127) by sign(b, a): the pair sums are ≤ 2·127² and
//    exact; VPMADDWD by ones widens them to int32. 2 rows per pass (temporaries need registers).
#include "cpu/int8_gemm.hpp"

#if SKETCHCORE_INT8_X86

#include <chrono>
#include <cstring>

#include "cpu/x86_intrinsics.hpp"

#define SKETCHCORE_AVX2_INT8_TARGET __attribute__((target("avx2,fma")))
#define SKETCHCORE_AVXVNNI_TARGET __attribute__((target("avx2,fma,avxvnni")))

namespace sketchcore::detail {

namespace {

/// The lanes of the first `count` of 8 as a load/store mask.
SKETCHCORE_AVX2_INT8_TARGET inline __m256i lanes(std::int64_t count) {
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count < 0 ? 0 : count > 8 ? 8 : count)), index);
}

/// Writes float(sum − offset) · row_scale · col_scale for `R` rows and the columns [0, cols) of
/// a 32-column half (cols ≤ 32); `offsets` null for signed activations.
template <int R>
SKETCHCORE_AVX2_INT8_TARGET inline void store_half(const __m256i (&sum)[R][4], const float* row_scale,
                                                   const std::int32_t* offsets, const float* col_scale, float* c,
                                                   std::int64_t ldc, std::int64_t cols) {
  for (int v = 0; v < 4 && 8 * v < cols; ++v) {
    const __m256i mask = lanes(cols - 8 * v);
    const __m256 cs = _mm256_loadu_ps(col_scale + 8 * v);
    const __m256i off = offsets ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(offsets + 8 * v))
                                : _mm256_setzero_si256();
    for (int i = 0; i < R; ++i) {
      const __m256 value = _mm256_cvtepi32_ps(_mm256_sub_epi32(sum[i][v], off));
      _mm256_maskstore_ps(c + i * ldc + 8 * v, mask, _mm256_mul_ps(value, _mm256_mul_ps(_mm256_set1_ps(row_scale[i]), cs)));
    }
  }
}

template <int R>
SKETCHCORE_AVXVNNI_TARGET void half_vnni(std::int64_t groups, const std::uint8_t* a, std::int64_t lda,
                                         const float* row_scale, const std::int8_t* panel,
                                         const std::int32_t* offsets, const float* col_scale, float* c,
                                         std::int64_t ldc, std::int64_t cols) {
  __m256i sum[R][4];
  for (int i = 0; i < R; ++i) {
    for (int v = 0; v < 4; ++v) sum[i][v] = _mm256_setzero_si256();
  }
  for (std::int64_t g = 0; g < groups; ++g) {
    const auto* b = reinterpret_cast<const __m256i*>(panel + g * kInt8GroupBytes);
    const __m256i b0 = _mm256_load_si256(b), b1 = _mm256_load_si256(b + 1);
    const __m256i b2 = _mm256_load_si256(b + 2), b3 = _mm256_load_si256(b + 3);
    for (int i = 0; i < R; ++i) {
      std::int32_t quad;
      std::memcpy(&quad, a + i * lda + 4 * g, sizeof quad);
      const __m256i ai = _mm256_set1_epi32(quad);
      sum[i][0] = _mm256_dpbusd_avx_epi32(sum[i][0], ai, b0);
      sum[i][1] = _mm256_dpbusd_avx_epi32(sum[i][1], ai, b1);
      sum[i][2] = _mm256_dpbusd_avx_epi32(sum[i][2], ai, b2);
      sum[i][3] = _mm256_dpbusd_avx_epi32(sum[i][3], ai, b3);
    }
  }
  store_half<R>(sum, row_scale, offsets, col_scale, c, ldc, cols);
}

template <int R>
SKETCHCORE_AVX2_INT8_TARGET void half_avx2(std::int64_t groups, const std::uint8_t* a, std::int64_t lda,
                                           const float* row_scale, const std::int8_t* panel,
                                           const std::int32_t* /*offsets*/, const float* col_scale, float* c,
                                           std::int64_t ldc, std::int64_t cols) {
  __m256i sum[R][4];
  for (int i = 0; i < R; ++i) {
    for (int v = 0; v < 4; ++v) sum[i][v] = _mm256_setzero_si256();
  }
  const __m256i ones = _mm256_set1_epi16(1);
  for (std::int64_t g = 0; g < groups; ++g) {
    const auto* b = reinterpret_cast<const __m256i*>(panel + g * kInt8GroupBytes);
    for (int i = 0; i < R; ++i) {
      std::int32_t quad;
      std::memcpy(&quad, a + i * lda + 4 * g, sizeof quad);
      const __m256i ai = _mm256_set1_epi32(quad), magnitude = _mm256_abs_epi8(ai);
      for (int v = 0; v < 4; ++v) {
        const __m256i pairs = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(_mm256_load_si256(b + v), ai));
        sum[i][v] = _mm256_add_epi32(sum[i][v], _mm256_madd_epi16(pairs, ones));
      }
    }
  }
  store_half<R>(sum, row_scale, nullptr, col_scale, c, ldc, cols);
}

using HalfKernel = void (*)(std::int64_t, const std::uint8_t*, std::int64_t, const float*, const std::int8_t*,
                            const std::int32_t*, const float*, float*, std::int64_t, std::int64_t);

/// Runs kernels[r − 1] over row blocks of up to `max_rows` and both halves of the panel.
void run_tile(const HalfKernel* kernels, std::int64_t max_rows, std::int64_t rows, std::int64_t groups,
              const std::uint8_t* a, std::int64_t lda, const float* row_scale, const std::int8_t* panel,
              const std::int32_t* offsets, const float* col_scale, float* c, std::int64_t ldc, std::int64_t cols) {
  for (std::int64_t i = 0; i < rows; i += max_rows) {
    const std::int64_t r = rows - i < max_rows ? rows - i : max_rows;
    for (std::int64_t h = 0; h < 2 && 32 * h < cols; ++h) {
      kernels[r - 1](groups, a + i * lda, lda, row_scale + i, panel + 32 * 4 * h, offsets + 32 * h,
                     col_scale + 32 * h, c + i * ldc + 32 * h, ldc, cols - 32 * h < 32 ? cols - 32 * h : 32);
    }
  }
}

}  // namespace

void int8_tile_avx_vnni(std::int64_t rows, std::int64_t groups, const std::uint8_t* a, std::int64_t lda,
                        const float* row_scale, const std::int8_t* panel, const std::int32_t* offsets,
                        const float* col_scale, float* c, std::int64_t ldc, std::int64_t cols) {
  static const HalfKernel kernels[] = {half_vnni<1>, half_vnni<2>, half_vnni<3>};
  run_tile(kernels, 3, rows, groups, a, lda, row_scale, panel, offsets, col_scale, c, ldc, cols);
}

void int8_tile_avx2(std::int64_t rows, std::int64_t groups, const std::uint8_t* a, std::int64_t lda,
                    const float* row_scale, const std::int8_t* panel, const std::int32_t* offsets,
                    const float* col_scale, float* c, std::int64_t ldc, std::int64_t cols) {
  static const HalfKernel kernels[] = {half_avx2<1>, half_avx2<2>};
  run_tile(kernels, 2, rows, groups, a, lda, row_scale, panel, offsets, col_scale, c, ldc, cols);
}

SKETCHCORE_AVXVNNI_TARGET double int8_peak_avx_vnni(std::int64_t iterations) {
  __m256i sum[12];
  for (int v = 0; v < 12; ++v) sum[v] = _mm256_set1_epi32(v);
  const __m256i a = _mm256_set1_epi8(1), b = _mm256_set1_epi8(-1);
  const auto start = std::chrono::steady_clock::now();
  for (std::int64_t it = 0; it < iterations; ++it) {
    for (int v = 0; v < 12; ++v) sum[v] = _mm256_dpbusd_avx_epi32(sum[v], a, b);
    __asm__ volatile("" : "+x"(sum[0]), "+x"(sum[1]), "+x"(sum[2]), "+x"(sum[3]), "+x"(sum[4]), "+x"(sum[5]),
                     "+x"(sum[6]), "+x"(sum[7]), "+x"(sum[8]), "+x"(sum[9]), "+x"(sum[10]), "+x"(sum[11]));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  __m256i total = sum[0];
  for (int v = 1; v < 12; ++v) total = _mm256_add_epi32(total, sum[v]);
  std::int32_t sink[8];
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(sink), total);
  __asm__ volatile("" : : "r"(sink) : "memory");
  return seconds > 0 ? static_cast<double>(iterations) * 12.0 * 32.0 / seconds : 0.0;
}

}  // namespace sketchcore::detail

#endif  // SKETCHCORE_INT8_X86
