// The portable log and sin/cos of the Gaussian sketch against libm, in ulp, over the whole
// range the generator uses (open_unit: (0, 1)) and beyond.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>

#include "detail/portable_math.hpp"
#include "sketch/entries.hpp"

namespace {

/// |a − b| in units of the last place of b.
double ulps(double a, double b) {
  const double unit = std::nextafter(std::fabs(b), INFINITY) - std::fabs(b);
  return std::fabs(a - b) / unit;
}

TEST(PortableMath, LogIsWithinTwoUlpOfLibm) {
  std::mt19937_64 rng(7);
  double worst = 0.0;
  for (int i = 0; i < 200000; ++i) {
    const auto word = static_cast<std::uint32_t>(rng());
    const double u = sketchcore::detail::open_unit(word);
    worst = std::max(worst, ulps(sketchcore::detail::portable_log(u), std::log(u)));
  }
  for (double x : {1e-300, 1e-10, 0.5, 0.70710678118654746, 0.70710678118654757, 1.0 - 1e-16, 2.0, 3.0, 1e10, 1e300}) {
    const double expected = std::log(x);
    if (expected == 0.0) continue;
    worst = std::max(worst, ulps(sketchcore::detail::portable_log(x), expected));
  }
  EXPECT_LE(worst, 2.0);
  EXPECT_EQ(sketchcore::detail::portable_log(1.0), 0.0);
}

TEST(PortableMath, SinCosOfTurnsAreWithinFewUlpOfLibm) {
  std::mt19937_64 rng(11);
  double worst_abs = 0.0;
  for (int i = 0; i < 200000; ++i) {
    const double u = sketchcore::detail::open_unit(static_cast<std::uint32_t>(rng()));
    double s, c;
    sketchcore::detail::portable_sincos_turns(u, s, c);
    // The reference angle in long double, so that its own rounding does not count; the
    // error is absolute, at the scale of 1.
    const long double angle = 6.283185307179586476925286766559L * static_cast<long double>(u);
    worst_abs = std::max({worst_abs, static_cast<double>(std::fabs(s - std::sin(angle))),
                          static_cast<double>(std::fabs(c - std::cos(angle)))});
  }
  EXPECT_LE(worst_abs, 2 * 0x1p-53);
  double s, c;
  for (double quarter : {0.0, 0.25, 0.5, 0.75, 1.0}) {  // exact at quarter turns
    sketchcore::detail::portable_sincos_turns(quarter, s, c);
    EXPECT_EQ(s, std::round(std::sin(6.283185307179586 * quarter))) << quarter;
    EXPECT_EQ(c, std::round(std::cos(6.283185307179586 * quarter))) << quarter;
  }
}

TEST(PortableMath, BoxMullerPairsAreOnTheirCircle) {
  // radius² = cos² r² + sin² r²: the pair shares one radius, as Box–Muller requires.
  for (std::uint32_t w = 1; w < 4000000000u; w += 97654321u) {
    double s, c;
    const double r = sketchcore::detail::box_muller(w, w * 2654435761u, s, c);
    EXPECT_NEAR(std::hypot(r * s, r * c), r, 1e-14 * (1 + r));
    EXPECT_NEAR(r, std::sqrt(-2.0 * std::log(sketchcore::detail::open_unit(w))), 1e-15 * (1 + r));
  }
}

}  // namespace
