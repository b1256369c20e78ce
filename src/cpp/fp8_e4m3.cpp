// The host's e4m3 encoding (include/sketchcore/fp8_matmul.hpp): round to nearest even with
// saturation, as the device's cvt.rn.satfinite.e4m3 does. Scaling by powers of two is exact in
// float, so each step below is exact except the one rounding (nearbyint, ties to even).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "sketchcore/fp8_matmul.hpp"

namespace sketchcore {

namespace {

constexpr std::uint8_t kNanCode = 0x7F;
constexpr std::uint8_t kMaxCode = 0x7E;     // 448
constexpr int kMinNormalExponent = -6;      // 2^-6, code 0x08
constexpr int kMantissaBits = 3;
constexpr int kExponentBias = 7;

/// The code of |value| for a finite |value| < 448.
std::uint8_t magnitude_code(float magnitude) {
  if (magnitude == 0.0f) return 0;
  int exponent = 0;
  (void)std::frexp(magnitude, &exponent);  // magnitude = f · 2^exponent, f in [0.5, 1)
  // Subnormals share the smallest normal's step, 2^(-6-3); below it the code is the count of steps.
  const int e = std::max(exponent - 1, kMinNormalExponent);
  // nearbyint rounds in the current mode: ties to even, the default, which sketchcore never changes.
  const float steps = std::nearbyint(std::ldexp(magnitude, kMantissaBits - e));  // in [0, 16]
  // A normal code is (e + bias) · 8 + (steps − 8), a subnormal one (e = −6, steps < 8) is steps:
  // both are (e + bias − 1) · 8 + steps, and a rounding up to 16 steps carries into the exponent.
  const int code = (e + kExponentBias - 1) * (1 << kMantissaBits) + static_cast<int>(steps);
  return static_cast<std::uint8_t>(code > kMaxCode ? kMaxCode : code);
}

}  // namespace

std::uint8_t float_to_e4m3(float value) noexcept {
  if (std::isnan(value)) return kNanCode;
  const std::uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  const float magnitude = std::fabs(value);
  if (magnitude >= kE4m3Max) return static_cast<std::uint8_t>(sign | kMaxCode);
  return static_cast<std::uint8_t>(sign | magnitude_code(magnitude));
}

float e4m3_to_float(std::uint8_t code) noexcept {
  const int exponent_bits = (code >> kMantissaBits) & 0xF, mantissa = code & 0x7;
  if (exponent_bits == 0xF && mantissa == 0x7) return std::nanf("");
  const float magnitude = exponent_bits == 0
                              ? std::ldexp(static_cast<float>(mantissa), kMinNormalExponent - kMantissaBits)
                              : std::ldexp(static_cast<float>(8 + mantissa), exponent_bits - kExponentBias - kMantissaBits);
  return (code & 0x80) ? -magnitude : magnitude;
}

}  // namespace sketchcore
