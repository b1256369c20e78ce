// The float32 epilogue kernels (src/cpp/cpu/epilogue_kernels.cpp) against float64 libm:
// activations within 4 ulp of the correctly rounded value over random, edge and extreme
// arguments (denormals, ±FLT_MAX), the same inf/NaN behaviour as the scalar formulas of
// detail/activations.hpp, and the vectorised Philox words bit-identical to dropout_block.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cpu/epilogue_kernels.hpp"
#include "cpu/activation_isa.hpp"
#include "detail/activations.hpp"
#include "detail/philox.hpp"

namespace {

using sketchcore::Activation;
namespace d = sketchcore::detail;

constexpr double kC = 0.79788456080286535588, kA = 0.044715;

/// The float64 value of the activation (or its derivative), and the magnitude of the
/// largest term the derivative sums (its cancellation near roots limits any float result).
double reference(Activation act, double z, bool derivative, double& terms) {
  terms = 0.0;
  switch (act) {
    case Activation::relu:
      return derivative ? (z > 0 ? 1.0 : 0.0) : (z < 0 ? 0.0 : z);
    case Activation::gelu: {
      const double cdf = 0.5 * std::erfc(-z / std::sqrt(2.0)), pdf = 0.3989422804014327 * std::exp(-0.5 * z * z);
      terms = std::fabs(cdf) + std::fabs(z * pdf);
      return derivative ? cdf + z * pdf : z * cdf;
    }
    case Activation::gelu_tanh: {
      const double u = kC * (z + kA * z * z * z), s = 1.0 / (1.0 + std::exp(-2.0 * u));
      const double second = z * s * (1.0 - s) * 2.0 * kC * (1.0 + 3.0 * kA * z * z);
      terms = std::fabs(s) + std::fabs(second);
      return derivative ? s + second : z * s;
    }
    case Activation::silu: {
      const double s = 1.0 / (1.0 + std::exp(-z));
      terms = std::fabs(s) + std::fabs(s * z * (1.0 - s));
      return derivative ? s * (1.0 + z * (1.0 - s)) : z * s;
    }
    case Activation::none: return derivative ? 1.0 : z;
  }
  return 0.0;
}

/// One float32 ulp at |v| (the subnormal spacing below the smallest normal).
double ulp(double v) {
  const int e = std::max(std::ilogb(std::max(std::fabs(v), 1e-300)), -126);
  return std::ldexp(1.0, e - 23);
}

std::vector<float> arguments() {
  std::vector<float> z;
  std::mt19937 rng(26);
  for (double scale : {0.01, 0.3, 1.0, 3.0, 8.0, 30.0, 1e4}) {
    std::normal_distribution<float> normal(0.0f, static_cast<float>(scale));
    for (int i = 0; i < 20000; ++i) z.push_back(normal(rng));
  }
  for (int e = -149; e <= 127; ++e) {  // every binade, denormals included, both signs
    for (float m : {1.0f, 1.37f, 1.99f}) {
      z.push_back(std::ldexp(m, e));
      z.push_back(-std::ldexp(m, e));
    }
  }
  for (float v = -16.0f; v <= 16.0f; v += 1.0f / 512) z.push_back(v);  // the transition regions
  z.push_back(0.0f);
  z.push_back(-0.0f);
  z.push_back(std::numeric_limits<float>::max());
  z.push_back(-std::numeric_limits<float>::max());
  z.push_back(std::numeric_limits<float>::denorm_min());
  return z;
}

class Kernels : public ::testing::TestWithParam<Activation> {};

TEST_P(Kernels, ForwardWithinFourUlpOfFloat64) {
  const Activation act = GetParam();
  const std::vector<float> z = arguments();
  std::vector<float> y = z;
  d::activation_forward_f32(act, y.data(), nullptr, static_cast<std::int64_t>(y.size()));
  for (std::size_t i = 0; i < z.size(); ++i) {
    double terms;
    const double want = reference(act, z[i], false, terms);
    if (std::fabs(want) > std::numeric_limits<float>::max()) continue;  // overflows float32 (gelu_tanh)
    EXPECT_LE(std::fabs(y[i] - want), 4 * ulp(want)) << "z = " << z[i] << " got " << y[i] << " want " << want;
  }
}

TEST_P(Kernels, DerivativeWithinFourUlpOfItsTerms) {
  const Activation act = GetParam();
  const std::vector<float> h = arguments();
  std::vector<float> g = h, dy(h.size(), 1.0f);
  d::activation_backward_f32(act, dy.data(), g.data(), nullptr, static_cast<std::int64_t>(g.size()));
  for (std::size_t i = 0; i < h.size(); ++i) {
    double terms;
    const double want = reference(act, h[i], true, terms);
    if (!std::isfinite(want)) continue;  // inf·0 in the float64 formula itself (checked below)
    EXPECT_LE(std::fabs(g[i] - want), 4 * ulp(std::max(std::fabs(want), terms)))
        << "h = " << h[i] << " got " << g[i] << " want " << want;
  }
}

TEST_P(Kernels, BiasIsAddedInFloat32First) {
  const Activation act = GetParam();
  std::vector<float> y = {0.1f, -2.5f, 3.0f, 1e-3f, -7.0f}, bias = {0.2f, 0.5f, -1.0f, 1e-3f, 0.25f};
  std::vector<float> plain(y.size());
  for (std::size_t i = 0; i < y.size(); ++i) plain[i] = y[i] + bias[i];
  d::activation_forward_f32(act, y.data(), bias.data(), static_cast<std::int64_t>(y.size()));
  d::activation_forward_f32(act, plain.data(), nullptr, static_cast<std::int64_t>(plain.size()));
  for (std::size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i], plain[i]);
}

using Forward = d::ActivationKernels::Forward;
using Backward = d::ActivationKernels::Backward;

/// ±inf and NaN (in a vector of their own and amid finite arguments) give what the scalar
/// formulas of detail/activations.hpp give.
template <class ForwardFn, class BackwardFn>
void expect_inf_and_nan_as_the_scalar_formulas(Activation act, ForwardFn forward, BackwardFn backward) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> z = {inf, -inf, nan, -nan};
  for (int i = 0; i < 20; ++i) z.push_back(i % 5 == 0 ? inf : 0.25f * static_cast<float>(i - 10));
  std::vector<float> fwd = z, bwd = z, dy(z.size(), 1.0f);
  forward(fwd.data(), nullptr, static_cast<std::int64_t>(z.size()));
  backward(dy.data(), bwd.data(), nullptr, static_cast<std::int64_t>(z.size()));
  d::visit_activation(act, [&](auto f, auto g) {
    for (std::size_t i = 0; i < z.size(); ++i) {
      const float want_f = f(z[i]), want_g = g(z[i]);
      EXPECT_EQ(std::isnan(fwd[i]), std::isnan(want_f)) << "forward at " << z[i];
      if (!std::isnan(want_f) && !std::isfinite(z[i])) {
        EXPECT_EQ(fwd[i], want_f) << "forward at " << z[i];
      }
      EXPECT_EQ(std::isnan(bwd[i]), std::isnan(want_g)) << "derivative at " << z[i];
      if (!std::isnan(want_g) && !std::isfinite(z[i])) {
        EXPECT_EQ(bwd[i], want_g) << "derivative at " << z[i];
      }
    }
  });
}

TEST_P(Kernels, InfinityAndNanAsTheScalarFormulas) {
  const Activation act = GetParam();
  expect_inf_and_nan_as_the_scalar_formulas(
      act, [act](float* y, const float* b, std::int64_t n) { d::activation_forward_f32(act, y, b, n); },
      [act](const float* dy, float* g, const float* b, std::int64_t n) {
        d::activation_backward_f32(act, dy, g, b, n);
      });
}


/// One implementation of `act` (the one activation_*_f32 picks runs above too) against float64.
void check_kernels(Activation act, Forward forward, Backward backward) {
  const std::vector<float> z = arguments();
  std::vector<float> y = z, g = z, dy(z.size(), 1.0f);
  forward(y.data(), nullptr, static_cast<std::int64_t>(y.size()));
  backward(dy.data(), g.data(), nullptr, static_cast<std::int64_t>(g.size()));
  for (std::size_t i = 0; i < z.size(); ++i) {
    double terms;
    const double want = reference(act, z[i], false, terms);
    if (!std::isfinite(want)) continue;
    EXPECT_LE(std::fabs(y[i] - want), 4 * ulp(want)) << "z = " << z[i] << " got " << y[i] << " want " << want;
    const double slope = reference(act, z[i], true, terms);
    if (!std::isfinite(slope)) continue;
    EXPECT_LE(std::fabs(g[i] - slope), 4 * ulp(std::max(std::fabs(slope), terms)))
        << "h = " << z[i] << " got " << g[i] << " want " << slope;
  }
}

/// Every 257th float of [−200, 200] (8.6M arguments, whole vectors of neighbours: each side of
/// every near-zero/full-path boundary) through one implementation of `act`; returns the worst
/// forward and derivative errors in ulp (of the value; of the derivative's larger term).
std::pair<double, double> worst_over_floats(Activation act, Forward forward, Backward backward) {
  std::vector<float> z;
  for (std::uint32_t bits = 0; bits < 0x7f800000u; bits += 257) {
    float v;
    std::memcpy(&v, &bits, sizeof v);
    if (v > 200.0f) break;
    z.push_back(v);
    z.push_back(-v);
  }
  std::vector<float> y = z, g = z, dy(z.size(), 1.0f);
  forward(y.data(), nullptr, static_cast<std::int64_t>(y.size()));
  backward(dy.data(), g.data(), nullptr, static_cast<std::int64_t>(g.size()));
  double worst_forward = 0, worst_derivative = 0, terms;
  for (std::size_t i = 0; i < z.size(); ++i) {
    const double want = reference(act, z[i], false, terms);
    if (std::isfinite(want) && std::fabs(want) <= std::numeric_limits<float>::max()) {
      worst_forward = std::max(worst_forward, std::fabs(y[i] - want) / ulp(want));
    }
    const double slope = reference(act, z[i], true, terms);
    if (std::isfinite(slope)) {
      worst_derivative = std::max(worst_derivative, std::fabs(g[i] - slope) / ulp(std::max(std::fabs(slope), terms)));
    }
  }
  return {worst_forward, worst_derivative};
}

void expect_within_four_ulp_everywhere(const char* name, Activation act, Forward forward, Backward backward) {
  const auto [forward_ulp, derivative_ulp] = worst_over_floats(act, forward, backward);
  std::printf("%s: worst %.2f ulp forward, %.2f ulp derivative\n", name, forward_ulp, derivative_ulp);
  EXPECT_LE(forward_ulp, 4.0) << name;
  EXPECT_LE(derivative_ulp, 4.0) << name;
}

constexpr Activation kTabled[] = {Activation::gelu, Activation::gelu_tanh, Activation::silu};

/// One kernel family (cpu/activation_isa.hpp), called directly: every family the CPU can run is
/// tested, whichever one the library dispatches to.
class Family : public ::testing::TestWithParam<d::ActivationIsa> {
 protected:
  void SetUp() override {
    if (!d::activation_isa_supported(GetParam())) {
      GTEST_SKIP() << "this CPU cannot run the " << d::activation_isa_name(GetParam()) << " kernels";
    }
  }
  const d::ActivationKernels& kernels() const { return d::activation_kernels(GetParam()); }
};

TEST_P(Family, WithinFourUlpOverEvery257thFloat) {
  for (Activation act : kTabled) {
    const std::string name = std::string(sketchcore::activation_name(act)) + " " + d::activation_isa_name(GetParam());
    expect_within_four_ulp_everywhere(name.c_str(), act, kernels().forward(act), kernels().backward(act));
  }
}

TEST_P(Family, WithinFourUlpOverEdgeAndRandomArguments) {
  for (Activation act : kTabled) check_kernels(act, kernels().forward(act), kernels().backward(act));
}

TEST_P(Family, InfinityAndNanAsTheScalarFormulas) {
  for (Activation act : kTabled) {
    expect_inf_and_nan_as_the_scalar_formulas(act, kernels().forward(act), kernels().backward(act));
  }
}

/// Each family agrees with the dispatched one, with a bias and at lengths that are not a
/// multiple of the vector width (the AVX-512 kernels mask the last vector, the AVX2 ones copy it).
TEST_P(Family, AgreesWithTheDispatchedOneWithBiasAndRaggedLengths) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (Activation act : kTabled) {
    for (std::int64_t n : {1, 7, 8, 9, 15, 16, 17, 33, 100}) {
      std::vector<float> y(static_cast<std::size_t>(n)), bias(y.size()), dy(y.size());
      for (std::size_t i = 0; i < y.size(); ++i) {
        y[i] = normal(rng);
        bias[i] = normal(rng);
        dy[i] = normal(rng);
      }
      std::vector<float> a = y, b = y, ga = y, gb = y;
      kernels().forward(act)(a.data(), bias.data(), n);
      d::activation_forward_f32(act, b.data(), bias.data(), n);
      kernels().backward(act)(dy.data(), ga.data(), bias.data(), n);
      d::activation_backward_f32(act, dy.data(), gb.data(), bias.data(), n);
      for (std::size_t i = 0; i < y.size(); ++i) {
        EXPECT_LE(std::fabs(a[i] - b[i]), 8 * ulp(a[i])) << "n = " << n << " i = " << i;
        EXPECT_LE(std::fabs(ga[i] - gb[i]), 8 * ulp(std::max(std::fabs(ga[i]), std::fabs(dy[i])))) << "n = " << n;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, Family,
                         ::testing::Values(d::ActivationIsa::portable, d::ActivationIsa::avx2,
                                           d::ActivationIsa::avx512),
                         [](const ::testing::TestParamInfo<d::ActivationIsa>& info) {
                           return std::string(d::activation_isa_name(info.param));
                         });

INSTANTIATE_TEST_SUITE_P(Activations, Kernels,
                         ::testing::Values(Activation::relu, Activation::gelu, Activation::gelu_tanh,
                                           Activation::silu));

TEST(DropoutWords, BitIdenticalToDropoutBlock) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const std::uint64_t seed = rng(), row = trial % 3 == 0 ? rng() : rng() % 5000, group0 = rng() % 100000;
    const std::int64_t groups = 1 + static_cast<std::int64_t>(rng() % 300);
    std::vector<std::uint32_t> words(static_cast<std::size_t>(4 * groups));
    d::dropout_words(words.data(), seed, row, group0, groups);
    for (std::int64_t i = 0; i < groups; ++i) {
      const d::Philox4x32 block = d::dropout_block(seed, row, group0 + static_cast<std::uint64_t>(i));
      for (int l = 0; l < 4; ++l) ASSERT_EQ(words[static_cast<std::size_t>(4 * i + l)], block.v[l]);
    }
  }
}

TEST(DropoutWords, ApplyKeepsExactlyTheWordsAtOrAboveTheThreshold) {
  const std::vector<std::uint32_t> words = {0u, 99u, 100u, 101u, 0xFFFFFFFFu};
  std::vector<float> y(5, 2.0f);
  std::vector<double> y64(5, 2.0);
  d::dropout_apply_f32(y.data(), words.data(), 100u, 1.5f, 5);
  d::dropout_apply_f64(y64.data(), words.data(), 100u, 1.5, 5);
  const std::vector<double> want = {0.0, 0.0, 3.0, 3.0, 3.0};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(y[i], static_cast<float>(want[i]));
    EXPECT_EQ(y64[i], want[i]);
  }
}

}  // namespace
