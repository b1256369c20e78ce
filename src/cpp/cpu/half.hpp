// float16 and bfloat16 on the CPU: conversions to and from float32 (round to nearest even,
// NaN kept NaN, overflow to infinity), and the staging that lets the CPU backend compute a
// 16-bit problem in float32: operands widened into pooled float32 copies, results computed
// there and rounded once into the caller's 16-bit destination.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "detail/bit_cast.hpp"
#include "detail/scratch.hpp"
#include "sketchcore/tensor.hpp"

namespace sketchcore::detail {

inline std::uint32_t float_bits(float f) noexcept { return bit_cast<std::uint32_t>(f); }

inline float bits_float(std::uint32_t u) noexcept { return bit_cast<float>(u); }

/// bfloat16 (the high half of a float32) → float32: exact.
inline float bfloat16_to_float(std::uint16_t h) noexcept { return bits_float(std::uint32_t{h} << 16); }

/// float32 → bfloat16, round to nearest even; NaN stays a (quiet) NaN.
inline std::uint16_t float_to_bfloat16(float f) noexcept {
  const std::uint32_t u = float_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  const std::uint32_t rounding = 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>((u + rounding) >> 16);
}

/// IEEE binary16 → float32: exact (subnormals included).
inline float float16_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = std::uint32_t{h & 0x8000u} << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu;
  if (exponent == 0x1F) return bits_float(sign | 0x7F800000u | (mantissa << 13));  // inf, NaN
  if (exponent != 0) return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // Subnormal (or zero): mantissa · 2^-24, exact in float32.
  const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
  return bits_float(sign | float_bits(magnitude));
}

/// float32 → IEEE binary16, round to nearest even; overflow gives ±inf, NaN stays NaN.
inline std::uint16_t float_to_float16(float f) noexcept {
  const std::uint32_t u = float_bits(f);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t magnitude = u & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7E00u);  // NaN
  if (magnitude >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // ≥ 65520 rounds to inf
  if (magnitude < 0x38800000u) {  // below 2^-14: a subnormal half (or zero)
    // Scale so that one half-subnormal unit (2^-24) is one integer unit, then round to even.
    const float scaled = bits_float(magnitude) * 16777216.0f;  // exact: a power-of-two scale
    const auto whole = static_cast<std::uint32_t>(scaled);
    const float rest = scaled - static_cast<float>(whole);
    const std::uint32_t rounded = whole + ((rest > 0.5f || (rest == 0.5f && (whole & 1u))) ? 1u : 0u);
    return static_cast<std::uint16_t>(sign | rounded);
  }
  // Normal: rebias the exponent (127 → 15) and round the 23-bit mantissa to 10 bits.
  const std::uint32_t rebased = magnitude - (std::uint32_t{112} << 23);
  const std::uint32_t rounding = 0xFFFu + ((rebased >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | ((rebased + rounding) >> 13));
}

/// dst[i] = src[i] widened to float32 for i < n (`dtype` float16 or bfloat16): the same
/// bits as float16_to_float / bfloat16_to_float, vectorised (cpu/convert_kernels.cpp).
void widen_half(DType dtype, const std::uint16_t* src, float* dst, std::int64_t n) noexcept;

/// dst[i] = src[i] rounded to `dtype` (float16 or bfloat16) for i < n: the same bits as
/// float_to_float16 / float_to_bfloat16, vectorised.
void narrow_half(DType dtype, const float* src, std::uint16_t* dst, std::int64_t n) noexcept;

/// narrow_half(float16) without F16C, as on CPUs that lack it (exposed for the tests).
void narrow_float16_portable(const float* src, std::uint16_t* dst, std::int64_t n) noexcept;

/// Whether the CPU computes `dtype` through float32 staging.
inline bool is_half(DType dtype) noexcept { return dtype == DType::float16 || dtype == DType::bfloat16; }

/// A float32 copy of a 16-bit view, compact row-major, from the host pool.
class Widened {
 public:
  /// Copies `view` (any strides) into float32; a float32/float64 view is not copied.
  explicit Widened(const TensorView& view);
  /// The float32 view (or the original view when it was not 16-bit).
  const TensorView& view() const noexcept { return view_; }

 private:
  Scratch<float> storage_;
  TensorView view_;
};

/// A float32 destination for a 16-bit view: computed into, then rounded into the view.
class Narrowed {
 public:
  /// Allocates compact float32 room shaped like `destination` (nothing for other dtypes).
  explicit Narrowed(const TensorView& destination);
  /// Where to compute: the float32 room, or `destination` itself when it is not 16-bit.
  const TensorView& view() const noexcept { return view_; }
  /// Rounds the computed values into the destination (no-op when not 16-bit).
  void store() const;

 private:
  TensorView destination_;
  Scratch<float> storage_;
  TensorView view_;
};

}  // namespace sketchcore::detail
