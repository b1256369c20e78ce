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
#include <limits>

#include "cpu/x86_intrinsics.hpp"

#define SKETCHCORE_AVX2_INT8_TARGET __attribute__((target("avx2,fma")))
#define SKETCHCORE_AVXVNNI_TARGET __attribute__((target("avx2,fma,avxvnni")))

namespace sketchcore::detail {

namespace {

/// sum + Σ of the four u8 × s8 products of each lane (asm with the sum tied to the result: GCC 12
/// moves the intrinsic's sums around every instruction; see cpu/int8_kernels_avx512.cpp).
SKETCHCORE_AVXVNNI_TARGET inline __m256i dot(__m256i sum, __m256i a, __m256i b) {
  __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(sum) : "x"(a), "x"(b));
  return sum;
}

/// Loads (or zeroes, for the first block) the sums of R rows of a 32-column half.
template <int R>
SKETCHCORE_AVX2_INT8_TARGET inline void load_sums(__m256i (&sum)[R][4], const std::int32_t* acc, bool first) {
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      sum[i][v] = first ? _mm256_setzero_si256()
                        : _mm256_load_si256(reinterpret_cast<const __m256i*>(acc + i * kInt8PanelCols + 8 * v));
    }
  }
}

template <int R>
SKETCHCORE_AVX2_INT8_TARGET inline void store_sums(const __m256i (&sum)[R][4], std::int32_t* acc) {
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) _mm256_store_si256(reinterpret_cast<__m256i*>(acc + i * kInt8PanelCols + 8 * v), sum[i][v]);
  }
}

template <int R>
SKETCHCORE_AVXVNNI_TARGET void half_vnni(std::int64_t groups, const std::uint8_t* a, std::int64_t lda,
                                         const std::int8_t* panel, std::int32_t* acc, bool first) {
  __m256i sum[R][4];
  load_sums<R>(sum, acc, first);
  for (std::int64_t g = 0; g < groups; ++g) {
    const auto* b = reinterpret_cast<const __m256i*>(panel + g * kInt8GroupBytes);
    const __m256i b0 = _mm256_load_si256(b), b1 = _mm256_load_si256(b + 1);
    const __m256i b2 = _mm256_load_si256(b + 2), b3 = _mm256_load_si256(b + 3);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      std::int32_t quad;
      std::memcpy(&quad, a + i * lda + 4 * g, sizeof quad);
      const __m256i ai = _mm256_set1_epi32(quad);
      sum[i][0] = dot(sum[i][0], ai, b0);
      sum[i][1] = dot(sum[i][1], ai, b1);
      sum[i][2] = dot(sum[i][2], ai, b2);
      sum[i][3] = dot(sum[i][3], ai, b3);
    }
  }
  store_sums<R>(sum, acc);
}

template <int R>
SKETCHCORE_AVX2_INT8_TARGET void half_avx2(std::int64_t groups, const std::uint8_t* a, std::int64_t lda,
                                           const std::int8_t* panel, std::int32_t* acc, bool first) {
  __m256i sum[R][4];
  load_sums<R>(sum, acc, first);
  const __m256i ones = _mm256_set1_epi16(1);
  for (std::int64_t g = 0; g < groups; ++g) {
    const auto* b = reinterpret_cast<const __m256i*>(panel + g * kInt8GroupBytes);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      std::int32_t quad;
      std::memcpy(&quad, a + i * lda + 4 * g, sizeof quad);
      const __m256i ai = _mm256_set1_epi32(quad), magnitude = _mm256_abs_epi8(ai);
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        const __m256i pairs = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(_mm256_load_si256(b + v), ai));
        sum[i][v] = _mm256_add_epi32(sum[i][v], _mm256_madd_epi16(pairs, ones));
      }
    }
  }
  store_sums<R>(sum, acc);
}

using HalfKernel = void (*)(std::int64_t, const std::uint8_t*, std::int64_t, const std::int8_t*, std::int32_t*, bool);

/// Runs kernels[r − 1] over row blocks of up to `max_rows` and both halves of the panel.
void run_tile(const HalfKernel* kernels, std::int64_t max_rows, std::int64_t rows, std::int64_t groups,
              const std::uint8_t* a, std::int64_t lda, const std::int8_t* panel, std::int32_t* acc, bool first) {
  for (std::int64_t i = 0; i < rows; i += max_rows) {
    const std::int64_t r = rows - i < max_rows ? rows - i : max_rows;
    for (std::int64_t h = 0; h < 2; ++h) {
      kernels[r - 1](groups, a + i * lda, lda, panel + 32 * 4 * h, acc + i * kInt8PanelCols + 32 * h, first);
    }
  }
}

}  // namespace

void int8_tile_avx_vnni(std::int64_t rows, std::int64_t groups, const std::uint8_t* a, std::int64_t lda,
                        const std::int8_t* panel, std::int32_t* acc, bool first) {
  static const HalfKernel kernels[] = {half_vnni<1>, half_vnni<2>, half_vnni<3>};
  run_tile(kernels, 3, rows, groups, a, lda, panel, acc, first);
}

void int8_tile_avx2(std::int64_t rows, std::int64_t groups, const std::uint8_t* a, std::int64_t lda,
                    const std::int8_t* panel, std::int32_t* acc, bool first) {
  static const HalfKernel kernels[] = {half_avx2<1>, half_avx2<2>};
  run_tile(kernels, 2, rows, groups, a, lda, panel, acc, first);
}

SKETCHCORE_AVX2_INT8_TARGET float quantize_row_avx2(const float* x, std::int64_t cols, std::int64_t padded, bool offset,
                                                 std::uint8_t* dst) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f), largest = _mm256_set1_ps(std::numeric_limits<float>::max());
  __m256 max_abs = _mm256_setzero_ps(), not_finite = _mm256_setzero_ps();
  std::int64_t j = 0;
  for (; j + 8 <= cols; j += 8) {
    const __m256 a = _mm256_andnot_ps(sign_bit, _mm256_loadu_ps(x + j));
    max_abs = _mm256_max_ps(max_abs, a);
    not_finite = _mm256_or_ps(not_finite, _mm256_cmp_ps(a, largest, _CMP_NLE_UQ));  // NaN or infinity
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, max_abs);
  float largest_abs = 0.0f;
  for (const float lane : lanes) largest_abs = lane > largest_abs ? lane : largest_abs;
  bool finite = _mm256_movemask_ps(not_finite) == 0;
  for (; j < cols; ++j) {  // the tail as quantize_rows_int8's scalar code
    const float a = x[j] < 0.0f ? -x[j] : x[j];
    largest_abs = a > largest_abs ? a : largest_abs;
    finite &= a <= std::numeric_limits<float>::max();
  }
  const std::uint8_t zero = offset ? 128 : 0;
  if (!finite || largest_abs == 0.0f) {
    std::memset(dst, zero, static_cast<std::size_t>(padded));
    return finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
  }
  const float boost = int8_tiny_row_boost(largest_abs);  // as quantize_rows_int8's scalar code
  const float inverse = 127.0f / (largest_abs * boost);
  const __m256 inverse_all = _mm256_set1_ps(inverse), low = _mm256_set1_ps(-127.0f), high = _mm256_set1_ps(127.0f),
               boost_all = _mm256_set1_ps(boost);
  const __m128i shift = _mm_set1_epi8(static_cast<char>(zero));
  // x · boost · (127 / max) as the scalar code rounds it, clamped (the bounds are integers, so
  // clamping first rounds the same), rounded half to even by the default MXCSR; 16 values per pass.
  j = 0;
  for (; j + 16 <= cols; j += 16) {
    const __m256 q0 = _mm256_min_ps(high, _mm256_max_ps(low, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + j), boost_all), inverse_all)));
    const __m256 q1 = _mm256_min_ps(high, _mm256_max_ps(low, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + j + 8), boost_all), inverse_all)));
    const __m256i words = _mm256_permute4x64_epi64(_mm256_packs_epi32(_mm256_cvtps_epi32(q0), _mm256_cvtps_epi32(q1)), 0xD8);
    const __m128i bytes = _mm_packs_epi16(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + j), _mm_add_epi8(bytes, shift));
  }
  constexpr float kRound = 12582912.0f;  // as the scalar code: 1.5 · 2^23 rounds half to even
  for (; j < cols; ++j) {
    float clamped = x[j] * boost * inverse;
    clamped = clamped > -127.0f ? clamped : -127.0f;
    clamped = clamped < 127.0f ? clamped : 127.0f;
    const float q = (clamped + kRound) - kRound;
    dst[j] = static_cast<std::uint8_t>(static_cast<std::int32_t>(q) + zero);
  }
  std::memset(dst + cols, zero, static_cast<std::size_t>(padded - cols));
  return largest_abs / 127.0f;
}

SKETCHCORE_AVXVNNI_TARGET double int8_peak_avx_vnni(std::int64_t iterations) {
  __m256i s0 = _mm256_set1_epi32(0), s1 = _mm256_set1_epi32(1), s2 = _mm256_set1_epi32(2), s3 = _mm256_set1_epi32(3), s4 = _mm256_set1_epi32(4), s5 = _mm256_set1_epi32(5), s6 = _mm256_set1_epi32(6), s7 = _mm256_set1_epi32(7), s8 = _mm256_set1_epi32(8), s9 = _mm256_set1_epi32(9), s10 = _mm256_set1_epi32(10), s11 = _mm256_set1_epi32(11);
  const __m256i a = _mm256_set1_epi8(1), b = _mm256_set1_epi8(-1);
  const auto start = std::chrono::steady_clock::now();
  for (std::int64_t it = 0; it < iterations; ++it) {
    __asm__ volatile(
        "%{vex%} vpdpbusd %13, %12, %0\n\t"
        "%{vex%} vpdpbusd %13, %12, %1\n\t"
        "%{vex%} vpdpbusd %13, %12, %2\n\t"
        "%{vex%} vpdpbusd %13, %12, %3\n\t"
        "%{vex%} vpdpbusd %13, %12, %4\n\t"
        "%{vex%} vpdpbusd %13, %12, %5\n\t"
        "%{vex%} vpdpbusd %13, %12, %6\n\t"
        "%{vex%} vpdpbusd %13, %12, %7\n\t"
        "%{vex%} vpdpbusd %13, %12, %8\n\t"
        "%{vex%} vpdpbusd %13, %12, %9\n\t"
        "%{vex%} vpdpbusd %13, %12, %10\n\t"
        "%{vex%} vpdpbusd %13, %12, %11\n\t"
        : "+x"(s0), "+x"(s1), "+x"(s2), "+x"(s3), "+x"(s4), "+x"(s5), "+x"(s6), "+x"(s7), "+x"(s8), "+x"(s9), "+x"(s10), "+x"(s11)
        : "x"(a), "x"(b));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const __m256i parts[] = {s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11};
  __m256i total = _mm256_setzero_si256();
  for (const __m256i& part : parts) total = _mm256_add_epi32(total, part);
  std::int32_t sink[8];
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(sink), total);
  __asm__ volatile("" : : "r"(sink) : "memory");
  return seconds > 0 ? static_cast<double>(iterations) * 12.0 * 32.0 / seconds : 0.0;
}

}  // namespace sketchcore::detail

#endif  // SKETCHCORE_INT8_X86
