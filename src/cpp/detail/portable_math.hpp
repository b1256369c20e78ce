// The transcendental functions of the Gaussian sketch, written with +, −, ×, ÷, sqrt,
// frexp and floor only. IEEE 754 rounds each of those exactly the same way on every CPU and
// every CUDA device, while libm's and CUDA's log/sin/cos differ in their last bits (and
// between glibc versions). So the same seed gives the same Gaussian bits everywhere.
//
// Two rules keep the bits identical:
//  * no fused multiply-add: device code uses the explicitly rounded __dmul_rn/__dadd_rn
//    (nvcc never fuses them); host code is compiled with -ffp-contract=off (CMakeLists).
//  * the coefficients are written as hexadecimal literals, never computed.
// Accuracy: within a few ulp of the correctly rounded results (checked in tests/cpp).
#pragma once

#include <cmath>

#include "detail/philox.hpp"  // SKETCHCORE_HOST_DEVICE

namespace sketchcore::detail {

SKETCHCORE_HOST_DEVICE double mul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

SKETCHCORE_HOST_DEVICE double add_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

SKETCHCORE_HOST_DEVICE double sqrt_rn(double x) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(x);
#else
  return std::sqrt(x);
#endif
}

/// Natural logarithm of a positive normal x. x = m·2^e with m in [√½, √2);
/// log m = 2·atanh(f), f = (m − 1)/(m + 1), |f| ≤ 0.172, by its series to f^23.
SKETCHCORE_HOST_DEVICE double portable_log(double x) {
  int e = 0;
#if defined(__CUDA_ARCH__)
  double m = frexp(x, &e);
#else
  double m = std::frexp(x, &e);
#endif
  if (m < 0x1.6a09e667f3bcdp-1) {  // √½
    m = mul_rn(m, 2.0);
    --e;
  }
  const double f = (m - 1.0) / add_rn(m, 1.0);  // m − 1 is exact (Sterbenz)
  const double s = mul_rn(f, f);
  // Σ_{k≥1} s^(k−1)/(2k+1), k = 1 … 11, by Horner.
  constexpr double kInverseOdd[11] = {0x1.5555555555555p-2, 0x1.999999999999ap-3, 0x1.2492492492492p-3,
                                      0x1.c71c71c71c71cp-4, 0x1.745d1745d1746p-4, 0x1.3b13b13b13b14p-4,
                                      0x1.1111111111111p-4, 0x1.e1e1e1e1e1e1ep-5, 0x1.af286bca1af28p-5,
                                      0x1.8618618618618p-5, 0x1.642c8590b2164p-5};
  double p = kInverseOdd[10];
  for (int k = 9; k >= 0; --k) p = add_rn(mul_rn(p, s), kInverseOdd[k]);
  const double log_m = mul_rn(add_rn(f, mul_rn(f, mul_rn(s, p))), 2.0);
  // e·ln2 split as hi + lo: hi has 33 significant bits, so e·hi is exact.
  const double de = static_cast<double>(e);
  return add_rn(mul_rn(de, 0x1.62e42fee00000p-1), add_rn(log_m, mul_rn(de, 0x1.a39ef35793c76p-33)));
}

/// sin(2πu) and cos(2πu) for u in [0, 1]. u − q/4 (q = nearest quarter turn) is exact, so
/// the reduction loses nothing; the rest is Taylor series on |2π·r| ≤ π/4 (to x^17, x^18).
SKETCHCORE_HOST_DEVICE void portable_sincos_turns(double u, double& sine, double& cosine) {
#if defined(__CUDA_ARCH__)
  const double q = floor(add_rn(mul_rn(u, 4.0), 0.5));
#else
  const double q = std::floor(add_rn(mul_rn(u, 4.0), 0.5));
#endif
  const double r = add_rn(u, -mul_rn(q, 0.25));
  const double x = mul_rn(r, 0x1.921fb54442d18p+2);  // 2π
  const double x2 = mul_rn(x, x);
  constexpr double kSin[8] = {-0x1.5555555555555p-3, 0x1.1111111111111p-7,  -0x1.a01a01a01a01ap-13,
                              0x1.71de3a556c734p-19, -0x1.ae64567f544e4p-26, 0x1.6124613a86d09p-33,
                              -0x1.ae7f3e733b81fp-41, 0x1.952c77030ad4ap-49};  // (−1)^k/(2k+1)!
  constexpr double kCos[9] = {-0x1.0000000000000p-1, 0x1.5555555555555p-5,  -0x1.6c16c16c16c17p-10,
                              0x1.a01a01a01a01ap-16, -0x1.27e4fb7789f5cp-22, 0x1.1eed8eff8d898p-29,
                              -0x1.93974a8c07c9dp-37, 0x1.ae7f3e733b81fp-45, -0x1.6827863b97d97p-53};  // (−1)^k/(2k)!
  double ps = kSin[7];
  for (int k = 6; k >= 0; --k) ps = add_rn(mul_rn(ps, x2), kSin[k]);
  double pc = kCos[8];
  for (int k = 7; k >= 0; --k) pc = add_rn(mul_rn(pc, x2), kCos[k]);
  const double s = add_rn(x, mul_rn(x, mul_rn(x2, ps)));
  const double c = add_rn(1.0, mul_rn(x2, pc));
  switch (static_cast<int>(q) & 3) {  // angle = q quarter turns + x
    case 0: sine = s; cosine = c; break;
    case 1: sine = c; cosine = -s; break;
    case 2: sine = -s; cosine = -c; break;
    default: sine = -c; cosine = s; break;
  }
}

}  // namespace sketchcore::detail
