// float16 and bfloat16 on the CPU: the conversions (every 16-bit pattern round-trips; float32
// values round to nearest even, overflow to infinity, NaN stays NaN), and sketched_matmul
// computed in float32 and rounded once, against float64.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "cpu/half.hpp"
#include "sketchcore/sketchcore.hpp"

using sketchcore::DType;
using sketchcore::TensorView;
namespace d = sketchcore::detail;

namespace {

bool is_nan16(std::uint16_t h, bool bf16) {
  return bf16 ? (h & 0x7F80u) == 0x7F80u && (h & 0x7Fu) : (h & 0x7C00u) == 0x7C00u && (h & 0x3FFu);
}

TEST(Half, EveryPatternRoundTrips) {
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    if (is_nan16(h, false)) {
      EXPECT_TRUE(std::isnan(d::float16_to_float(h)));
      EXPECT_TRUE(is_nan16(d::float_to_float16(d::float16_to_float(h)), false));
    } else {
      EXPECT_EQ(d::float_to_float16(d::float16_to_float(h)), h) << bits;
    }
    if (is_nan16(h, true)) {
      EXPECT_TRUE(is_nan16(d::float_to_bfloat16(d::bfloat16_to_float(h)), true));
    } else {
      EXPECT_EQ(d::float_to_bfloat16(d::bfloat16_to_float(h)), h) << bits;
    }
  }
}

TEST(Half, Float16RoundsToNearestEven) {
  EXPECT_EQ(d::float16_to_float(d::float_to_float16(1.0f + 0x1p-11f)), 1.0f);                  // tie → even
  EXPECT_EQ(d::float16_to_float(d::float_to_float16(1.0f + 3 * 0x1p-11f)), 1.0f + 0x1p-9f);    // tie → even (up)
  EXPECT_EQ(d::float16_to_float(d::float_to_float16(1.0f + 0x1p-11f + 0x1p-20f)), 1.0f + 0x1p-10f);
  EXPECT_EQ(d::float16_to_float(d::float_to_float16(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(d::float16_to_float(d::float_to_float16(65520.0f))));
  EXPECT_EQ(d::float16_to_float(d::float_to_float16(65519.0f)), 65504.0f);
  EXPECT_EQ(d::float16_to_float(d::float_to_float16(0x1p-25f)), 0.0f);           // tie below the least subnormal → 0
  EXPECT_EQ(d::float16_to_float(d::float_to_float16(0x1.8p-24f)), 0x1p-23f);     // 1.5 units → 2 (even)
  EXPECT_EQ(d::float16_to_float(d::float_to_float16(-0x1p-14f)), -0x1p-14f);     // least normal
  EXPECT_EQ(d::float_to_float16(-0.0f), 0x8000u);
}

TEST(Half, RandomValuesMatchTheNearestRepresentable) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-70000.0f, 70000.0f);
  for (int i = 0; i < 100000; ++i) {
    const float f = dist(gen) * (i % 3 == 0 ? 1e-6f : 1.0f);
    const float h = d::float16_to_float(d::float_to_float16(f));
    if (std::isinf(h)) {
      EXPECT_GE(std::fabs(f), 65520.0f);
      continue;
    }
    // No representable neighbour of h is strictly closer to f.
    for (const std::uint16_t step : {std::uint16_t(1), std::uint16_t(0xFFFF)}) {
      const auto neighbour_bits = static_cast<std::uint16_t>(d::float_to_float16(h) + step);
      const float neighbour = d::float16_to_float(neighbour_bits);
      if (!std::isfinite(neighbour) || std::signbit(neighbour) != std::signbit(h)) continue;
      EXPECT_LE(std::fabs(h - f), std::fabs(neighbour - f)) << f;
    }
  }
}

template <class Convert, class Back>
double product_error(DType dtype, Convert to16, Back from16) {
  std::mt19937 gen(3);
  std::normal_distribution<float> dist;
  const int rows = 37, d_in = 29, k = 5, d_out = 11, terms = 2;
  std::vector<std::uint16_t> x(rows * d_in), S(terms * d_in * k), U(terms * k * d_out), y(rows * d_out);
  for (auto* v : {&x, &S, &U}) {
    for (auto& e : *v) e = to16(dist(gen) * 0.5f);
  }
  sketchcore::sketched_matmul(TensorView(x.data(), dtype, {rows, d_in}), TensorView(S.data(), dtype, {terms, d_in, k}),
                              TensorView(U.data(), dtype, {terms, k, d_out}), TensorView(y.data(), dtype, {rows, d_out}));
  double diff = 0, norm = 0;
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < d_out; ++c) {
      double want = 0;
      for (int t = 0; t < terms; ++t) {
        for (int j = 0; j < k; ++j) {
          double z = 0;
          for (int i = 0; i < d_in; ++i) z += double(from16(x[r * d_in + i])) * from16(S[(t * d_in + i) * k + j]);
          want += z * from16(U[(t * k + j) * d_out + c]);
        }
      }
      const double got = from16(y[r * d_out + c]);
      diff += (got - want) * (got - want);
      norm += want * want;
    }
  }
  return std::sqrt(diff / norm);
}

TEST(Half, SketchedMatmulInHalfPrecisionOnTheCpu) {
  EXPECT_LE(product_error(DType::float16, d::float_to_float16, d::float16_to_float), 1e-3);
  EXPECT_LE(product_error(DType::bfloat16, d::float_to_bfloat16, d::bfloat16_to_float), 8e-3);
}

}  // namespace
