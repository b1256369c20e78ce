// The AVX-512 VNNI int8 register kernel of cpu/int8_gemm.hpp, the activations' quantization and
// the peak loop: 6 rows × 64 columns of int32 sums in 24 zmm registers; per group of four inner
// indices, four 64-byte loads of the packed panel and one 4-byte broadcast per row feed 24
// VPDPBUSD (u8 activations + 128 × s8 weights, the column offsets removed when dequantizing).
#include "cpu/int8_gemm.hpp"

#if SKETCHCORE_INT8_X86

#include <chrono>
#include <cstring>
#include <limits>

#include "cpu/x86_intrinsics.hpp"

#define SKETCHCORE_VNNI512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

namespace sketchcore::detail {

namespace {

constexpr int kRows = 6;

SKETCHCORE_VNNI512_TARGET inline __mmask16 lanes(std::int64_t count) {
  return static_cast<__mmask16>((std::uint32_t{1} << (count < 0 ? 0 : count > 16 ? 16 : count)) - 1);
}

/// sum + Σ of the four u8 × s8 products of each lane. Written as asm with the sum tied to the
/// result: with the intrinsic, GCC 12 copies each sum to another register and to the stack
/// around every VPDPBUSD in the loop below (three extra moves per instruction).
SKETCHCORE_VNNI512_TARGET inline __m512i dot(__m512i sum, __m512i a, __m512i b) {
  __asm__("vpdpbusd %2, %1, %0" : "+v"(sum) : "v"(a), "v"(b));
  return sum;
}

// The sums are named variables, one per row and vector: GCC 12 keeps an array of vectors in
// memory (a store per VPDPBUSD), even when every index is a constant after unrolling. Rows at
// or past R are compiled out (if constexpr).
#define SKETCHCORE_ROW_SUMS(i)                                                       \
  __m512i c##i##0, c##i##1, c##i##2, c##i##3;                                        \
  if constexpr (R > i) {                                                             \
    c##i##0 = first ? zero : _mm512_load_si512(acc + i * kInt8PanelCols);            \
    c##i##1 = first ? zero : _mm512_load_si512(acc + i * kInt8PanelCols + 16);       \
    c##i##2 = first ? zero : _mm512_load_si512(acc + i * kInt8PanelCols + 32);       \
    c##i##3 = first ? zero : _mm512_load_si512(acc + i * kInt8PanelCols + 48);       \
  }
#define SKETCHCORE_ROW_DOT(i)                                   \
  if constexpr (R > i) {                                        \
    std::int32_t quad;                                          \
    std::memcpy(&quad, a + i * lda + 4 * g, sizeof quad);       \
    const __m512i ai = _mm512_set1_epi32(quad);                 \
    c##i##0 = dot(c##i##0, ai, b0);                             \
    c##i##1 = dot(c##i##1, ai, b1);                             \
    c##i##2 = dot(c##i##2, ai, b2);                             \
    c##i##3 = dot(c##i##3, ai, b3);                             \
  }
#define SKETCHCORE_ROW_STORE(i)                                       \
  if constexpr (R > i) {                                              \
    _mm512_store_si512(acc + i * kInt8PanelCols, c##i##0);            \
    _mm512_store_si512(acc + i * kInt8PanelCols + 16, c##i##1);       \
    _mm512_store_si512(acc + i * kInt8PanelCols + 32, c##i##2);       \
    _mm512_store_si512(acc + i * kInt8PanelCols + 48, c##i##3);       \
  }

template <int R>
SKETCHCORE_VNNI512_TARGET void tile_rows(std::int64_t groups, const std::uint8_t* a, std::int64_t lda,
                                         const std::int8_t* panel, std::int32_t* acc, bool first) {
  static_assert(R >= 1 && R <= kRows);
  const __m512i zero = _mm512_setzero_si512();
  SKETCHCORE_ROW_SUMS(0) SKETCHCORE_ROW_SUMS(1) SKETCHCORE_ROW_SUMS(2)
  SKETCHCORE_ROW_SUMS(3) SKETCHCORE_ROW_SUMS(4) SKETCHCORE_ROW_SUMS(5)
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::int8_t* b = panel + g * kInt8GroupBytes;
    const __m512i b0 = _mm512_load_si512(b), b1 = _mm512_load_si512(b + 64);
    const __m512i b2 = _mm512_load_si512(b + 128), b3 = _mm512_load_si512(b + 192);
    SKETCHCORE_ROW_DOT(0) SKETCHCORE_ROW_DOT(1) SKETCHCORE_ROW_DOT(2)
    SKETCHCORE_ROW_DOT(3) SKETCHCORE_ROW_DOT(4) SKETCHCORE_ROW_DOT(5)
  }
  SKETCHCORE_ROW_STORE(0) SKETCHCORE_ROW_STORE(1) SKETCHCORE_ROW_STORE(2)
  SKETCHCORE_ROW_STORE(3) SKETCHCORE_ROW_STORE(4) SKETCHCORE_ROW_STORE(5)
}

#undef SKETCHCORE_ROW_SUMS
#undef SKETCHCORE_ROW_DOT
#undef SKETCHCORE_ROW_STORE

}  // namespace

void int8_tile_avx512_vnni(std::int64_t rows, std::int64_t groups, const std::uint8_t* a, std::int64_t lda,
                           const std::int8_t* panel, std::int32_t* acc, bool first) {
  std::int64_t i = 0;
  for (; i + kRows <= rows; i += kRows) tile_rows<kRows>(groups, a + i * lda, lda, panel, acc + i * kInt8PanelCols, first);
  a += i * lda, acc += i * kInt8PanelCols;
  switch (rows - i) {
    case 1: tile_rows<1>(groups, a, lda, panel, acc, first); break;
    case 2: tile_rows<2>(groups, a, lda, panel, acc, first); break;
    case 3: tile_rows<3>(groups, a, lda, panel, acc, first); break;
    case 4: tile_rows<4>(groups, a, lda, panel, acc, first); break;
    case 5: tile_rows<5>(groups, a, lda, panel, acc, first); break;
    default: break;
  }
}

SKETCHCORE_VNNI512_TARGET float quantize_row_avx512(const float* x, std::int64_t cols, std::int64_t padded, bool offset,
                                                   std::uint8_t* dst) {
  __m512 max_abs = _mm512_setzero_ps();
  __mmask16 not_finite = 0;
  const __m512 largest = _mm512_set1_ps(std::numeric_limits<float>::max());
  for (std::int64_t j = 0; j < cols; j += 16) {
    const __mmask16 mask = lanes(cols - j);
    const __m512 a = _mm512_abs_ps(_mm512_maskz_loadu_ps(mask, x + j));
    max_abs = _mm512_max_ps(max_abs, a);
    not_finite |= _mm512_mask_cmp_ps_mask(mask, a, largest, _CMP_NLE_UQ);  // NaN or infinity
  }
  const float largest_abs = _mm512_reduce_max_ps(max_abs);
  const int zero = offset ? 128 : 0;
  if (not_finite || largest_abs == 0.0f) {
    std::memset(dst, zero, static_cast<std::size_t>(padded));
    return not_finite ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
  }
  const float boost = int8_tiny_row_boost(largest_abs);  // as quantize_rows_int8's scalar code
  const __m512 inverse = _mm512_set1_ps(127.0f / (largest_abs * boost)), low = _mm512_set1_ps(-127.0f),
               high = _mm512_set1_ps(127.0f), boost_all = _mm512_set1_ps(boost);
  const __m512i shift = _mm512_set1_epi32(zero);
  for (std::int64_t j = 0; j < cols; j += 16) {
    const __mmask16 mask = lanes(cols - j);
    // x · (127 / max) as the scalar code rounds it, clamped (the bounds are integers, so
    // clamping first rounds the same), rounded half to even by the default MXCSR.
    const __m512 boosted = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, x + j), boost_all);
    const __m512 q = _mm512_min_ps(high, _mm512_max_ps(low, _mm512_mul_ps(boosted, inverse)));
    const __m512i value = _mm512_add_epi32(_mm512_cvtps_epi32(q), shift);
    _mm_mask_storeu_epi8(dst + j, mask, _mm512_cvtepi32_epi8(value));
  }
  std::memset(dst + cols, zero, static_cast<std::size_t>(padded - cols));
  return largest_abs / 127.0f;
}

SKETCHCORE_VNNI512_TARGET double int8_peak_avx512_vnni(std::int64_t iterations) {
  __m512i s0 = _mm512_set1_epi32(0), s1 = _mm512_set1_epi32(1), s2 = _mm512_set1_epi32(2), s3 = _mm512_set1_epi32(3), s4 = _mm512_set1_epi32(4), s5 = _mm512_set1_epi32(5), s6 = _mm512_set1_epi32(6), s7 = _mm512_set1_epi32(7), s8 = _mm512_set1_epi32(8), s9 = _mm512_set1_epi32(9), s10 = _mm512_set1_epi32(10), s11 = _mm512_set1_epi32(11), s12 = _mm512_set1_epi32(12), s13 = _mm512_set1_epi32(13), s14 = _mm512_set1_epi32(14), s15 = _mm512_set1_epi32(15), s16 = _mm512_set1_epi32(16), s17 = _mm512_set1_epi32(17), s18 = _mm512_set1_epi32(18), s19 = _mm512_set1_epi32(19), s20 = _mm512_set1_epi32(20), s21 = _mm512_set1_epi32(21), s22 = _mm512_set1_epi32(22), s23 = _mm512_set1_epi32(23);
  const __m512i a = _mm512_set1_epi8(1), b = _mm512_set1_epi8(-1);
  const auto start = std::chrono::steady_clock::now();
  for (std::int64_t it = 0; it < iterations; ++it) {
    // 24 independent VPDPBUSD on sums kept in registers (asm, so the compiler cannot fold them;
    // 12 per statement: an asm takes at most 30 operands).
    __asm__ volatile(
        "vpdpbusd %13, %12, %0\n\t"
        "vpdpbusd %13, %12, %1\n\t"
        "vpdpbusd %13, %12, %2\n\t"
        "vpdpbusd %13, %12, %3\n\t"
        "vpdpbusd %13, %12, %4\n\t"
        "vpdpbusd %13, %12, %5\n\t"
        "vpdpbusd %13, %12, %6\n\t"
        "vpdpbusd %13, %12, %7\n\t"
        "vpdpbusd %13, %12, %8\n\t"
        "vpdpbusd %13, %12, %9\n\t"
        "vpdpbusd %13, %12, %10\n\t"
        "vpdpbusd %13, %12, %11\n\t"
        : "+v"(s0), "+v"(s1), "+v"(s2), "+v"(s3), "+v"(s4), "+v"(s5), "+v"(s6), "+v"(s7), "+v"(s8), "+v"(s9), "+v"(s10), "+v"(s11)
        : "v"(a), "v"(b));
    __asm__ volatile(
        "vpdpbusd %13, %12, %0\n\t"
        "vpdpbusd %13, %12, %1\n\t"
        "vpdpbusd %13, %12, %2\n\t"
        "vpdpbusd %13, %12, %3\n\t"
        "vpdpbusd %13, %12, %4\n\t"
        "vpdpbusd %13, %12, %5\n\t"
        "vpdpbusd %13, %12, %6\n\t"
        "vpdpbusd %13, %12, %7\n\t"
        "vpdpbusd %13, %12, %8\n\t"
        "vpdpbusd %13, %12, %9\n\t"
        "vpdpbusd %13, %12, %10\n\t"
        "vpdpbusd %13, %12, %11\n\t"
        : "+v"(s12), "+v"(s13), "+v"(s14), "+v"(s15), "+v"(s16), "+v"(s17), "+v"(s18), "+v"(s19), "+v"(s20), "+v"(s21), "+v"(s22), "+v"(s23)
        : "v"(a), "v"(b));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const __m512i parts[] = {s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15, s16, s17, s18, s19, s20, s21, s22, s23};
  __m512i total = _mm512_setzero_si512();
  for (const __m512i& part : parts) total = _mm512_add_epi32(total, part);
  std::int32_t sink[16];
  _mm512_storeu_si512(sink, total);
  __asm__ volatile("" : : "r"(sink) : "memory");
  return seconds > 0 ? static_cast<double>(iterations) * 24.0 * 64.0 / seconds : 0.0;
}

}  // namespace sketchcore::detail

#endif  // SKETCHCORE_INT8_X86
