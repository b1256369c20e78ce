// The hi + lo split of float32 operands for the bfloat16 GEMM (cpu/bf16_split.hpp).
#include "cpu/bf16_split.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "detail/parallel.hpp"

#if SKETCHCORE_GEMM_BF16
#include "cpu/x86_intrinsics.hpp"
#endif

namespace sketchcore::detail {

#if SKETCHCORE_GEMM_BF16

namespace {

/// Splits one row of `cols` floats into (hi, lo) pairs, 16 at a time (VCVTNEPS2BF16 rounds to
/// nearest even, as float_to_bfloat16 does).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void split_row(const float* src, std::int64_t cols,
                                                                               std::uint32_t* dst) {
  for (std::int64_t q = 0; q < cols; q += 16) {
    const std::int64_t left = std::min<std::int64_t>(16, cols - q);
    const __mmask16 mask = static_cast<__mmask16>((std::uint32_t{1} << left) - 1);
    const __m512 z = _mm512_maskz_loadu_ps(mask, src + q);
    const __m256i hi = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(z));
    // hi widened back exactly (its bits in the high half), z − hi exact, then rounded
    const __m512 hi_wide = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16));
    const __m256i lo = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_sub_ps(z, hi_wide)));
    const __m512i pairs = _mm512_or_si512(_mm512_cvtepu16_epi32(hi), _mm512_slli_epi32(_mm512_cvtepu16_epi32(lo), 16));
    _mm512_mask_storeu_epi32(dst + q, mask, pairs);
  }
}

}  // namespace

void split_bf16_pairs(const float* src, std::int64_t ld, std::int64_t rows, std::int64_t cols, std::uint32_t* dst,
                      std::int64_t ld_dst) {
  const std::int64_t grain = std::max<std::int64_t>(1, (std::int64_t{1} << 14) / std::max<std::int64_t>(cols, 1));
  parallel_for(rows, grain, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t i = r0; i < r1; ++i) split_row(src + i * ld, cols, dst + i * ld_dst);
  });
}

#else

void split_bf16_pairs(const float*, std::int64_t, std::int64_t, std::int64_t, std::uint32_t*, std::int64_t) {
  throw std::logic_error("sketchcore: split_bf16_pairs called where gemm_bf16_available() is false");
}

#endif

void repeat_rows_bf16(const Bf16Operand& b, std::int64_t rows, std::int64_t cols, std::uint16_t* dst) {
  for (std::int64_t q = 0; q < rows; ++q) {
    std::uint16_t* out = dst + 2 * q * cols;
    if (!b.transposed) {
      std::memcpy(out, b.data + q * b.ld, cols * sizeof(std::uint16_t));
    } else {
      for (std::int64_t j = 0; j < cols; ++j) out[j] = b.data[j * b.ld + q];
    }
    std::memcpy(out + cols, out, cols * sizeof(std::uint16_t));
  }
}

}  // namespace sketchcore::detail
