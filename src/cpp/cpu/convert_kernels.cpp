// Bulk float16/bfloat16 ⇄ float32 conversions (declared in cpu/half.hpp): the same bits as
// the scalar conversions there, written branch-free so that the compiler vectorises them,
// and compiled for AVX-512, AVX2 and baseline x86-64 like the epilogue kernels.
#include <cstdint>
#include <cstring>

#include "cpu/half.hpp"
#include "cpu/target_clones.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SKETCHCORE_X86_F16C 1
#endif

namespace sketchcore::detail {

namespace {

inline float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t{h & 0x8000u} << 16, em = h & 0x7FFFu;
  const std::uint32_t normal = (em << 13) + (std::uint32_t{112} << 23);  // rebias 15 → 127
  const std::uint32_t special = normal + (std::uint32_t{112} << 23);     // exponent 31 → 255
  // Subnormal or zero: mantissa · 2^-24, exact in float32.
  const std::uint32_t small = float_bits(static_cast<float>(static_cast<std::int32_t>(em)) * 5.9604644775390625e-8f);
  const std::uint32_t magnitude = em >= 0x7C00u ? special : (em >= 0x0400u ? normal : small);
  return bits_float(sign | magnitude);
}

inline std::uint32_t f32_to_f16(std::uint32_t u) {  // u: the float32's bits; the half in the low 16 bits
  const std::uint32_t sign = (u >> 31) << 15, magnitude = u & 0x7FFFFFFFu;
  const std::uint32_t rebased = magnitude - (std::uint32_t{112} << 23);
  const std::uint32_t normal = (rebased + 0xFFFu + ((rebased >> 13) & 1u)) >> 13;
  // Below 2^-14 a subnormal half: the 24-bit significand shifted right by 126 − exponent
  // (in units of 2^-24), rounded half to even; bitwise so that nothing branches.
  const bool tiny = magnitude < 0x38800000u;
  const std::uint32_t exponent = magnitude >> 23, significand = (magnitude & 0x7FFFFFu) | 0x800000u;
  std::uint32_t shift = 126u - (exponent < 126u ? exponent : 126u);
  shift = shift > 31u ? 31u : shift;
  const std::uint32_t whole = significand >> shift, rest = significand & ((1u << shift) - 1u);
  const std::uint32_t half = (1u << shift) >> 1;
  const std::uint32_t up = static_cast<std::uint32_t>(rest > half) | (static_cast<std::uint32_t>(rest == half) & whole & 1u);
  std::uint32_t result = tiny ? whole + up : normal;
  result = magnitude >= 0x477FF000u ? 0x7C00u : result;
  result = magnitude > 0x7F800000u ? 0x7E00u : result;
  return sign | result;
}

inline std::uint16_t f32_to_bf16(float f) {
  const std::uint32_t u = float_bits(f);
  const auto rounded = static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  const auto quiet = static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  return (u & 0x7FFFFFFFu) > 0x7F800000u ? quiet : rounded;
}

SKETCHCORE_CLONES void widen_f16(const std::uint16_t* __restrict src, float* __restrict dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}
SKETCHCORE_CLONES void widen_bf16(const std::uint16_t* __restrict src, float* __restrict dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = bits_float(std::uint32_t{src[i]} << 16);
}
// GCC 12 does not vectorise the branch-free float → half rounding above (its 16-bit result
// defeats the vectoriser's type analysis), so x86 CPUs with F16C (every AVX2 CPU) use the
// instruction made for it; it rounds to nearest even like f32_to_f16 (NaN payloads aside).
}  // namespace

void narrow_float16_portable(const float* src, std::uint16_t* dst, std::int64_t n) noexcept {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = static_cast<std::uint16_t>(f32_to_f16(float_bits(src[i])));
}

namespace {

#if defined(SKETCHCORE_X86_F16C)
__attribute__((target("avx,f16c"))) void narrow_f16_f16c(const float* src, std::uint16_t* dst, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  }
  narrow_float16_portable(src + i, dst + i, n - i);
}
__attribute__((target("avx,f16c"))) void widen_f16_f16c(const std::uint16_t* src, float* dst, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
  for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}
bool has_f16c() noexcept {
  static const bool yes = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return yes;
}
#endif

SKETCHCORE_CLONES void narrow_bf16(const float* __restrict src, std::uint16_t* __restrict dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

}  // namespace

void widen_half(DType dtype, const std::uint16_t* src, float* dst, std::int64_t n) noexcept {
  if (dtype == DType::float16) {
#if defined(SKETCHCORE_X86_F16C)
    if (has_f16c()) return widen_f16_f16c(src, dst, n);
#endif
    widen_f16(src, dst, n);
  } else {
    widen_bf16(src, dst, n);
  }
}

void narrow_half(DType dtype, const float* src, std::uint16_t* dst, std::int64_t n) noexcept {
  if (dtype == DType::float16) {
#if defined(SKETCHCORE_X86_F16C)
    if (has_f16c()) return narrow_f16_f16c(src, dst, n);
#endif
    narrow_float16_portable(src, dst, n);
  } else {
    narrow_bf16(src, dst, n);
  }
}

}  // namespace sketchcore::detail
