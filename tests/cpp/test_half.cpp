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

namespace {

// The bulk conversions (vectorised, F16C where the CPU has it) give the scalar conversions'
// bits: every 16-bit pattern widened, and float32 patterns of every kind narrowed (random
// bits, the rounding boundaries, subnormal halves, overflow), NaN only required to stay NaN.
TEST(HalfBulk, WidenEveryPatternAsTheScalarConversion) {
  std::vector<std::uint16_t> all(65536 + 5);
  for (std::uint32_t b = 0; b < all.size(); ++b) all[b] = static_cast<std::uint16_t>(b);
  for (const bool bf16 : {false, true}) {
    std::vector<float> out(all.size());
    d::widen_half(bf16 ? DType::bfloat16 : DType::float16, all.data(), out.data(), static_cast<std::int64_t>(all.size()));
    for (std::size_t i = 0; i < all.size(); ++i) {
      const float want = bf16 ? d::bfloat16_to_float(all[i]) : d::float16_to_float(all[i]);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(out[i])) << i;
      } else {
        EXPECT_EQ(d::float_bits(out[i]), d::float_bits(want)) << i;
      }
    }
  }
}

TEST(HalfBulk, NarrowAsTheScalarConversion) {
  std::mt19937 rng(5);
  std::vector<float> in;
  for (int i = 0; i < 200000; ++i) in.push_back(d::bits_float(static_cast<std::uint32_t>(rng())));
  for (std::uint32_t h = 0; h < 0x7C00u; ++h) {  // every half value ± half an ulp: ties and neighbours
    const float v = d::float16_to_float(static_cast<std::uint16_t>(h));
    for (int delta : {-1, 0, 1}) {
      for (std::uint32_t half_ulp : {0x1000u, 0x0FFFu}) {
        const std::uint32_t bits = d::float_bits(v) + half_ulp + static_cast<std::uint32_t>(delta);
        in.push_back(d::bits_float(bits));
        in.push_back(-d::bits_float(bits));
      }
    }
  }
  for (float v : {65504.0f, 65519.0f, 65520.0f, 1e30f, 5.96e-8f, 2.98e-8f, 2.99e-8f, 1e-40f, 0.0f, -0.0f}) in.push_back(v);
  for (const bool bf16 : {false, true}) {
    std::vector<std::uint16_t> out(in.size());
    d::narrow_half(bf16 ? DType::bfloat16 : DType::float16, in.data(), out.data(), static_cast<std::int64_t>(in.size()));
    for (std::size_t i = 0; i < in.size(); ++i) {
      if (std::isnan(in[i])) {
        EXPECT_TRUE(is_nan16(out[i], bf16)) << i;
      } else {
        EXPECT_EQ(out[i], bf16 ? d::float_to_bfloat16(in[i]) : d::float_to_float16(in[i])) << "input bits " << std::hex
                                                                                          << d::float_bits(in[i]);
      }
    }
  }
  std::vector<std::uint16_t> portable(in.size());  // the path of CPUs without F16C
  d::narrow_float16_portable(in.data(), portable.data(), static_cast<std::int64_t>(in.size()));
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (std::isnan(in[i])) {
      EXPECT_TRUE(is_nan16(portable[i], false)) << i;
    } else {
      EXPECT_EQ(portable[i], d::float_to_float16(in[i])) << "input bits " << std::hex << d::float_bits(in[i]);
    }
  }
}

}  // namespace
