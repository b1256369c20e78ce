// Branch-free element functions for the float32 epilogue kernels (cpu/epilogue_kernels.cpp),
// written so that GCC and Clang vectorise the loops that call them: no libm calls, no
// data-dependent branches (both sides of every choice are computed and one is selected),
// integer work done on the bits of doubles (the "magic number" rounding trick, shifts).
//
// They compute in double and are rounded to float32 once by the caller. Double is not a
// luxury here: the activations' arguments are ill-conditioned where the results are small
// (erfc(−z/√2) for z ≪ 0 amplifies the rounding error of −z/√2 by ~z², σ(2u) that of u by
// ~2|u|), so an all-float32 evaluation is tens of ulp off there (measured on the previous
// std::erfc/std::exp float path). With the arguments and the reductions in double, each
// function is accurate to ~1e-9 relative and every float32 result is within 1 ulp of the
// float64 reference (tests/cpp/test_vector_math.cpp, tests/test_activation_ulp.py).
#pragma once

#include <cstdint>

#include "detail/bit_cast.hpp"

namespace sketchcore::detail::vmath {

/// e^x: 0 below −708, e^708 above 708 (so 2^n stays a normal double); NaN stays NaN.
/// x = n·ln2 + r, |r| ≤ ln2/2, e^r by its Taylor series to r^7 (relative error < 6e-9, a tenth of
/// a float32 ulp), 2^n from bits.
inline double exp(double x) noexcept {
  const bool underflow = x < -708.0;
  x = underflow ? -708.0 : x;
  x = x > 708.0 ? 708.0 : x;
  constexpr double kMagic = 0x1.8p52;  // adding it rounds to an integer kept in the low bits
  const double shifted = x * 0x1.71547652b82fep0 + kMagic;  // x·log2(e) + magic
  const double n = shifted - kMagic;
  // ln2 = hi + lo, hi with 33 significant bits: n·hi is exact for |n| < 2^20.
  const double r = (x - n * 0x1.62e42fee00000p-1) - n * 0x1.a39ef35793c76p-33;
  double p = 0x1.a01a01a01a01ap-13;  // 1/7!
  p = p * r + 0x1.6c16c16c16c17p-10;  // 1/6!
  p = p * r + 0x1.1111111111111p-7;   // 1/5!
  p = p * r + 0x1.5555555555555p-5;   // 1/4!
  p = p * r + 0x1.5555555555555p-3;   // 1/3!
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  // The low 52 bits of `shifted` hold 2^51 + n; shifted left by 52 only n survives.
  const std::uint64_t scale = (bit_cast<std::uint64_t>(shifted) << 52) + (std::uint64_t{1023} << 52);
  return underflow ? 0.0 : p * bit_cast<double>(scale);
}

/// σ(v) = 1/(1 + e^−v) and its complement 1 − σ(v) = σ(−v), both without cancellation:
/// with e = e^−|v|, the larger is 1/(1 + e) and the smaller e/(1 + e).
inline void sigmoid_pair(double v, double& s, double& complement) noexcept {
  const double a = v < 0.0 ? -v : v;
  const double e = exp(-a);
  const double inv = 1.0 / (1.0 + e);
  const double big = inv, small = e * inv;
  s = v < 0.0 ? small : big;
  complement = v < 0.0 ? big : small;
}

/// erfcx(a) = e^(a²)·erfc(a) for a in [0, 10.5]: t·Q(t), t = 4/(4 + a), with Q a degree-11
/// polynomial in s = t·kA + kB ∈ [−1, 1], fitted (weighted Chebyshev least squares against
/// scipy.special.erfcx) to a relative error below 5e-10 on the whole interval.
inline double erfcx(double a) noexcept {
  const double t = 4.0 / (4.0 + a);  // in double: d ln erfcx / d ln t reaches 4.5 near a = 0
  const double s = t * 0x1.6186186186186p+1 - 0x1.c30c30c30c30dp+0;
  double q = -0x1.7cef5641254f8p-22;
  q = q * s - 0x1.00c5cf1e128a0p-17;
  q = q * s - 0x1.76d397480c9ccp-16;
  q = q * s + 0x1.6dbbd7466e5fbp-14;
  q = q * s + 0x1.0bdefd20e231cp-10;
  q = q * s + 0x1.4b19911293134p-8;
  q = q * s + 0x1.1d400d63c2313p-6;
  q = q * s + 0x1.7ee2e3dce5195p-5;
  q = q * s + 0x1.a2822cf44e565p-4;
  q = q * s + 0x1.7c2b5e9147a25p-3;
  q = q * s + 0x1.213d9aa7beddfp-2;
  q = q * s + 0x1.7014a1237b9aap-2;
  return t * q;
}

/// Beyond this |z|/√2, Φ(−|z|) < 1e-49: every float32 product with it is zero.
constexpr double kErfcxLimit = 10.5;

/// The normal distribution at h: Φ(h) and the density φ(h) = e^(−h²/2)/√(2π). With
/// a = |h|/√2 and E = e^(−a²): Φ(−|h|) = ½·E·erfcx(a), Φ(|h|) = 1 − Φ(−|h|).
inline void normal_cdf_pdf(double h, double& cdf, double& pdf) noexcept {
  const double a0 = (h < 0.0 ? -h : h) * 0x1.6a09e667f3bcdp-1;  // |h|/√2
  const bool tail = !(a0 <= kErfcxLimit);  // also NaN: its result comes from h itself
  const double a = tail ? kErfcxLimit : a0;
  const double e = exp(-a * a);
  const double lower = tail ? 0.0 : 0.5 * e * erfcx(a);  // Φ(−|h|)
  cdf = h < 0.0 ? lower : 1.0 - lower;
  pdf = tail ? 0.0 : e * 0x1.9884533d43651p-2;  // 1/√(2π)
}

// --- float32 throughout (16 lanes per AVX-512 vector), where the argument is exact: SiLU.

/// e^x = p·2^n for float x in [−125, 0] (callers clamp): returns p (≈ e^r, |r| ≤ ln2/2, to
/// float rounding) and sets n (an integer held in a float). ln2 = hi + lo, hi with 16
/// significant bits so that n·hi is exact.
inline float exp_parts(float x, float& n) noexcept {
  constexpr float kMagic = 0x1.8p23f;
  n = (x * 0x1.715476p0f + kMagic) - kMagic;
  const float r = (x - n * 0x1.62e4p-1f) - n * 0x1.7f7d1cp-20f;
  float p = 0x1.a01a02p-13f;  // Taylor to r^7: relative error < 6e-9
  p = p * r + 0x1.6c16c2p-10f;
  p = p * r + 0x1.111112p-7f;
  p = p * r + 0x1.555556p-5f;
  p = p * r + 0x1.555556p-3f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  return p * r + 1.0f;
}

/// q·2^n for an integer n in [−190, 0] and |q| ≥ 2^-60 with one rounding (also into the subnormals): 2^n is
/// applied in two exact-or-final steps when it is itself below the normal range.
inline float scale_pow2(float q, float n) noexcept {
  const bool deep = n < -126.0f;
  const float first = deep ? n + 64.0f : n;
  const float f1 = bit_cast<float>(static_cast<std::uint32_t>(static_cast<std::int32_t>(first) + 127) << 23);
  const float f2 = deep ? 0x1p-64f : 1.0f;
  return (q * f1) * f2;
}

/// SiLU z·σ(z) in float32 within 3 ulp: z/(1 + e) for z ≥ 0 and (z·p/(1 + e))·2^n for z < 0,
/// with e = e^−|z| = p·2^n, so that results in the subnormal range are rounded once.
inline float silu(float z) noexcept {
  const float a = z < 0.0f ? -z : z;
  const bool underflow = a > 125.0f;  // |z|·e^−|z| < 2^-151: the result rounds to zero
  float n;
  const float p = exp_parts(underflow ? -125.0f : -a, n);
  const float e = underflow ? 0.0f : scale_pow2(p, n);
  const float den = 1.0f + e;
  const float negative = underflow ? z * 0.0f : scale_pow2(z * p / den, n);
  return z < 0.0f ? negative : z / den;
}

/// SiLU′ σ(h)·(1 + h·(1 − σ(h))) in float32, σ and 1 − σ without cancellation: for h ≥ 0
/// σ = 1/(1 + e), 1 − σ = e/(1 + e); for h < 0 the result is (p/(1 + e)·(1 + h/(1 + e)))·2^n,
/// scaled last so that subnormal results are rounded once.
inline float silu_derivative(float h) noexcept {
  const float a = h < 0.0f ? -h : h;
  const bool underflow = a > 125.0f;
  float n;
  const float p = exp_parts(underflow ? -125.0f : -a, n);
  const float e = underflow ? 0.0f : scale_pow2(p, n);
  const float inv = 1.0f / (1.0f + e);
  const float positive = inv * (1.0f + h * (e * inv));
  const float negative = underflow ? 0.0f * (1.0f + h) : scale_pow2(p * inv * (1.0f + h * inv), n);
  return h < 0.0f ? negative : positive;
}

}  // namespace sketchcore::detail::vmath
