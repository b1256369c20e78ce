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

// --- float32 (16 lanes per AVX-512 vector): SiLU and GELU-tanh, the latter with its argument
// carried as a head and a tail.

/// e^(x + xl) = p·2^n for float x in [−125, 0] (callers clamp) and a small tail xl (|xl| ≤
/// 2^-20·|x|, or 0): returns p (≈ e^r, r = x + xl − n·ln2, |r| ≤ ln2/2 + 2^-12) and sets n (an
/// integer held in a float). ln2 = hi + lo, hi with 16 significant bits so that n·hi and
/// x − n·hi are exact; e^r by a relative minimax polynomial of degree 6 (error 0.3·2^-24).
inline float exp_parts(float x, float xl, float& n) noexcept {
  constexpr float kMagic = 0x1.8p23f;
  n = (x * 0x1.715476p0f + kMagic) - kMagic;
  const float r = (x - n * 0x1.62e4p-1f) + (xl - n * 0x1.7f7d1cp-20f);
  float p = 0x1.6ab976p-10f;
  p = p * r + 0x1.126d0cp-7f;
  p = p * r + 0x1.55589ap-5f;
  p = p * r + 0x1.55540ap-3f;
  p = p * r + 0x1.fffffap-2f;
  p = p * r + 1.0f;
  return p * r + 1.0f;
}

/// e^x = p·2^n: exp_parts without a tail (−0 − y folds to −y, so it costs nothing).
inline float exp_parts(float x, float& n) noexcept { return exp_parts(x, -0.0f, n); }

/// q·2^n for an integer n in [−190, 0] and |q| ≥ 2^-60 with one rounding (also into the subnormals): 2^n is
/// applied in two exact-or-final steps when it is itself below the normal range.
inline float scale_pow2(float q, float n) noexcept {
  const bool deep = n < -126.0f;
  const float first = deep ? n + 64.0f : n;
  const float f1 = bit_cast<float>(static_cast<std::uint32_t>(static_cast<std::int32_t>(first) + 127) << 23);
  const float f2 = deep ? 0x1p-64f : 1.0f;
  return (q * f1) * f2;
}

/// z·σ(v) and the pieces of σ(v) for float32 z and v = vh + vl (vl a small tail, or 0), with
/// e = e^−|v| = p·2^n: the larger of σ(v), 1 − σ(v) is 1/(1 + e), the smaller e/(1 + e); results
/// in the subnormal range are rounded once (the scaling by 2^n comes last).
/// The pieces of σ(v): e^−|v| = p·2^n (returned, n set), inv = 1/(1 + e^−|v|), and whether
/// |v| > 125 (e^−|v| < 2^-180: every product with it rounds to 0). Plain values, no struct: GCC
/// vectorises the callers' loops only when every piece is a scalar.
template <bool kTail>
inline float logistic(float vh, float vl, float& n, float& inv, bool& underflow) noexcept {
  const float a = vh < 0.0f ? -vh : vh;
  underflow = a > 125.0f;
  float p;
  if constexpr (kTail) {
    const float tail = vh < 0.0f ? vl : -vl;  // the tail of −|v|
    p = exp_parts(underflow ? -125.0f : -a, underflow ? 0.0f : tail, n);
  } else {
    p = exp_parts(underflow ? -125.0f : -a, n);
  }
  const float e = underflow ? 0.0f : scale_pow2(p, n);
  inv = 1.0f / (1.0f + e);
  return p;
}

/// z·σ(v) for z with the sign of v (SiLU: v = z; GELU-tanh: v = 2c(z + a z³)) within 3 ulp:
/// z/(1 + e) for v ≥ 0 and (z·p/(1 + e))·2^n for v < 0.
template <bool kTail>
inline float times_logistic(float z, float vh, float vl) noexcept {
  float n, inv;
  bool underflow;
  const float p = logistic<kTail>(vh, vl, n, inv, underflow);
  const float y = z * inv;
  const float negative = underflow ? z * 0.0f : scale_pow2(y * p, n);
  return vh < 0.0f ? negative : y;
}

/// d/dz [z·σ(v(z))] = σ + z·σ·(1 − σ)·v′ with σ and 1 − σ without cancellation: for v ≥ 0
/// inv·(1 + z·e·inv·v′), for v < 0 (p·inv·(1 + z·inv·v′))·2^n, inv = 1/(1 + e), both formed in
/// double and rounded once (in float, inv's and v′'s roundings reach 4 ulp).
template <bool kTail, class Wide>
inline float times_logistic_derivative(float z, float vh, float vl, Wide dv) noexcept {
  float n, unused;
  bool underflow;
  const float p = logistic<kTail>(vh, vl, n, unused, underflow);
  const float e = underflow ? 0.0f : scale_pow2(p, n);
  // 1/(1 + e) in Wide too: it enters twice, and float's two roundings of it cost 2 ulp.
  const Wide inv = Wide(1) / (Wide(1) + Wide(e)), zw = z;
  const float positive = static_cast<float>(inv * (Wide(1) + zw * (Wide(e) * inv) * dv));
  const float q = static_cast<float>(Wide(p) * inv * (Wide(1) + zw * inv * dv));
  const float negative = underflow ? 0.0f * (1.0f + z) : scale_pow2(q, n);
  return vh < 0.0f ? negative : positive;
}

/// SiLU z·σ(z) in float32 within 3 ulp (its argument is exact: no tail).
inline float silu(float z) noexcept { return times_logistic<false>(z, z, 0.0f); }

/// SiLU′ σ(h)·(1 + h·(1 − σ(h))).
inline float silu_derivative(float h) noexcept { return times_logistic_derivative<false>(h, h, 0.0f, 1.0); }

/// GELU-tanh's argument v = 2c·(z + a·z³) as a float head and tail: computed in double (its
/// relative error 2^-50), so that e^−|v| carries no rounding of v, whose size reaches 125.
inline void gelu_tanh_argument(float z, float& vh, float& vl) noexcept {
  const double zd = z;
  const double v = zd * (0x1.9884533d43651p+0 + 0x1.2444f2a4d8b4bp-4 * (zd * zd));  // 2c, 2c·a
  vh = static_cast<float>(v);
  vl = static_cast<float>(v - static_cast<double>(vh));
}

/// GELU-tanh z·σ(v), v = 2c·(z + a·z³), within 3 ulp.
inline float gelu_tanh(float z) noexcept {
  float vh, vl;
  gelu_tanh_argument(z, vh, vl);
  return times_logistic<true>(z, vh, vl);
}

/// GELU-tanh′ σ(v) + z·σ(v)·(1 − σ(v))·v′(z), v′ = 2c·(1 + 3a·z²).
inline float gelu_tanh_derivative(float z) noexcept {
  float vh, vl;
  gelu_tanh_argument(z, vh, vl);
  const double zd = z;
  return times_logistic_derivative<true>(z, vh, vl, 0x1.9884533d43651p+0 * (1.0 + 0x1.12ba9d1f60179p-3 * (zd * zd)));
}

}  // namespace sketchcore::detail::vmath
