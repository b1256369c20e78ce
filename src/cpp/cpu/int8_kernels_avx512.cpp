// The AVX-512 VNNI int8 register kernel of cpu/int8_gemm.hpp and its peak loop: 6 rows × 64
// columns of int32 sums in 24 zmm registers; per group of four inner indices, four 64-byte
// loads of the packed panel and one 4-byte broadcast per row feed 24 VPDPBUSD (u8 activations
// + 128 × s8 weights, the column offsets removed in the epilogue).
#include "cpu/int8_gemm.hpp"

#if SKETCHCORE_INT8_X86

#include <chrono>
#include <cstring>

#include "cpu/x86_intrinsics.hpp"

#define SKETCHCORE_VNNI512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

namespace sketchcore::detail {

namespace {

constexpr int kRows = 6;

SKETCHCORE_VNNI512_TARGET inline __mmask16 lanes(std::int64_t count) {
  return static_cast<__mmask16>((std::uint32_t{1} << (count < 0 ? 0 : count > 16 ? 16 : count)) - 1);
}

template <int R>
SKETCHCORE_VNNI512_TARGET void tile_rows(std::int64_t groups, const std::uint8_t* a, std::int64_t lda,
                                         const float* row_scale, const std::int8_t* panel,
                                         const std::int32_t* offsets, const float* col_scale, float* c,
                                         std::int64_t ldc, std::int64_t cols) {
  __m512i sum[R][4];
  for (int i = 0; i < R; ++i) {
    for (int v = 0; v < 4; ++v) sum[i][v] = _mm512_setzero_si512();
  }
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::int8_t* b = panel + g * kInt8GroupBytes;
    const __m512i b0 = _mm512_load_si512(b), b1 = _mm512_load_si512(b + 64);
    const __m512i b2 = _mm512_load_si512(b + 128), b3 = _mm512_load_si512(b + 192);
    for (int i = 0; i < R; ++i) {
      std::int32_t quad;
      std::memcpy(&quad, a + i * lda + 4 * g, sizeof quad);
      const __m512i ai = _mm512_set1_epi32(quad);
      sum[i][0] = _mm512_dpbusd_epi32(sum[i][0], ai, b0);
      sum[i][1] = _mm512_dpbusd_epi32(sum[i][1], ai, b1);
      sum[i][2] = _mm512_dpbusd_epi32(sum[i][2], ai, b2);
      sum[i][3] = _mm512_dpbusd_epi32(sum[i][3], ai, b3);
    }
  }
  for (int v = 0; v < 4; ++v) {
    const __mmask16 mask = lanes(cols - 16 * v);
    if (!mask) break;
    const __m512i off = _mm512_loadu_si512(offsets + 16 * v);
    const __m512 cs = _mm512_loadu_ps(col_scale + 16 * v);
    for (int i = 0; i < R; ++i) {
      const __m512 value = _mm512_cvtepi32_ps(_mm512_sub_epi32(sum[i][v], off));
      const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(row_scale[i]), cs);
      _mm512_mask_storeu_ps(c + i * ldc + 16 * v, mask, _mm512_mul_ps(value, scale));
    }
  }
}

}  // namespace

void int8_tile_avx512_vnni(std::int64_t rows, std::int64_t groups, const std::uint8_t* a, std::int64_t lda,
                           const float* row_scale, const std::int8_t* panel, const std::int32_t* offsets,
                           const float* col_scale, float* c, std::int64_t ldc, std::int64_t cols) {
  std::int64_t i = 0;
  for (; i + kRows <= rows; i += kRows) {
    tile_rows<kRows>(groups, a + i * lda, lda, row_scale + i, panel, offsets, col_scale, c + i * ldc, ldc, cols);
  }
  const auto rest = rows - i;
  a += i * lda, row_scale += i, c += i * ldc;
  switch (rest) {
    case 1: tile_rows<1>(groups, a, lda, row_scale, panel, offsets, col_scale, c, ldc, cols); break;
    case 2: tile_rows<2>(groups, a, lda, row_scale, panel, offsets, col_scale, c, ldc, cols); break;
    case 3: tile_rows<3>(groups, a, lda, row_scale, panel, offsets, col_scale, c, ldc, cols); break;
    case 4: tile_rows<4>(groups, a, lda, row_scale, panel, offsets, col_scale, c, ldc, cols); break;
    case 5: tile_rows<5>(groups, a, lda, row_scale, panel, offsets, col_scale, c, ldc, cols); break;
    default: break;
  }
}

SKETCHCORE_VNNI512_TARGET double int8_peak_avx512_vnni(std::int64_t iterations) {
  __m512i sum[24];
  for (int v = 0; v < 24; ++v) sum[v] = _mm512_set1_epi32(v);
  const __m512i a = _mm512_set1_epi8(1), b = _mm512_set1_epi8(-1);
  const auto start = std::chrono::steady_clock::now();
  for (std::int64_t it = 0; it < iterations; ++it) {
    for (int v = 0; v < 24; ++v) sum[v] = _mm512_dpbusd_epi32(sum[v], a, b);
    // Keeps the compiler from collapsing the loop (the sums stay in registers).
    __asm__ volatile("" : "+v"(sum[0]), "+v"(sum[1]), "+v"(sum[2]), "+v"(sum[3]), "+v"(sum[4]), "+v"(sum[5]),
                     "+v"(sum[6]), "+v"(sum[7]), "+v"(sum[8]), "+v"(sum[9]), "+v"(sum[10]), "+v"(sum[11]));
    __asm__ volatile("" : "+v"(sum[12]), "+v"(sum[13]), "+v"(sum[14]), "+v"(sum[15]), "+v"(sum[16]),
                     "+v"(sum[17]), "+v"(sum[18]), "+v"(sum[19]), "+v"(sum[20]), "+v"(sum[21]), "+v"(sum[22]),
                     "+v"(sum[23]));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::int32_t sink[16];
  __m512i total = sum[0];
  for (int v = 1; v < 24; ++v) total = _mm512_add_epi32(total, sum[v]);
  _mm512_storeu_si512(sink, total);
  __asm__ volatile("" : : "r"(sink) : "memory");
  return seconds > 0 ? static_cast<double>(iterations) * 24.0 * 64.0 / seconds : 0.0;
}

}  // namespace sketchcore::detail

#endif  // SKETCHCORE_INT8_X86
