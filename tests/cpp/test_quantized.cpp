// The unified quantized factor (include/sketchcore/quantized.hpp): the table of formats, one
// QuantizedFactor for every format (codes stored in one layout, checked by the format's rules),
// both formats through the one sketched GEMM entry point, and the errors each names. The named
// types Int8Factor and Fp8Factor are the same objects seen through their format.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "detail/quantized_storage.hpp"
#include "sketchcore/errors.hpp"
#include "sketchcore/fp8_matmul.hpp"
#include "sketchcore/int8_matmul.hpp"
#include "sketchcore/quantized.hpp"

namespace sc = sketchcore;

namespace {

template <class Call>
std::string message_of(Call&& call) {
  try {
    call();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

TEST(QuantFormat, TheTableDescribesEachFormat) {
  const std::vector<sc::QuantFormat> formats = sc::quant_formats();
  ASSERT_EQ(formats, (std::vector<sc::QuantFormat>{sc::QuantFormat::int8, sc::QuantFormat::fp8_e4m3}));
  const sc::QuantFormatInfo& i8 = sc::quant_format_info(sc::QuantFormat::int8);
  EXPECT_STREQ(i8.name, "int8");
  EXPECT_STREQ(i8.factor_type, "Int8Factor");
  EXPECT_EQ(i8.code_bytes, 1);
  EXPECT_EQ(i8.max_value, 127.0f);
  EXPECT_TRUE(i8.cpu_kernels);
  EXPECT_STREQ(i8.sketched_op, "int8_sketched_matmul");
  const sc::QuantFormatInfo& f8 = sc::quant_format_info(sc::QuantFormat::fp8_e4m3);
  EXPECT_STREQ(f8.name, "fp8_e4m3");
  EXPECT_STREQ(f8.factor_type, "Fp8Factor");
  EXPECT_EQ(f8.max_value, sc::kE4m3Max);
  EXPECT_EQ(sc::e4m3_to_float(sc::float_to_e4m3(f8.max_value)), f8.max_value);  // the scale rule's largest code
  EXPECT_FALSE(f8.cpu_kernels);
  for (const sc::QuantFormat format : formats) EXPECT_EQ(sc::quant_format_info(format).format, format);
  EXPECT_THROW((void)sc::quant_format_info(static_cast<sc::QuantFormat>(7)), std::invalid_argument);
}

TEST(QuantFormat, ValidCodesFollowEachFormat) {
  for (int code = 0; code < 256; ++code) {
    const auto c = static_cast<std::uint8_t>(code);
    EXPECT_EQ(sc::quant_code_valid(sc::QuantFormat::int8, c), code != 0x80) << code;
    EXPECT_EQ(sc::quant_code_valid(sc::QuantFormat::fp8_e4m3, c), code != 0x7F && code != 0xFF) << code;
  }
}

TEST(QuantizedFactor, StoresEveryFormatInOneLayoutAndNamesItsType) {
  const std::vector<std::uint8_t> codes{0x01, 0x02, 0x03, 0x04, 0x05, 0x06};  // 2 × 3, row-major
  const std::vector<float> scale{0.5f, 1.0f, 2.0f};
  for (const sc::QuantFormat format : sc::quant_formats()) {
    const sc::QuantizedFactor f(format, codes.data(), 2, 3, 3, 1, scale.data());
    EXPECT_EQ(f.format(), format);
    EXPECT_EQ(f.rows(), 2);
    EXPECT_EQ(f.cols(), 3);
    EXPECT_EQ(f.nbytes(), 16 * 16 + 16 * 4);  // no host backend copy for a plain factor
    EXPECT_EQ(f.storage().codes[16 + 1], 0x05);  // column 1, row 1
    std::vector<std::uint8_t> back(6);
    f.unpack_codes(back.data());
    EXPECT_EQ(back, codes);
    std::vector<std::uint8_t> bad = codes;
    bad[4] = format == sc::QuantFormat::int8 ? 0x80 : 0xFF;
    const std::string expected = std::string(sc::quant_format_info(format).factor_type) + ": " +
                                 sc::quant_format_info(format).codes_argument + ": expected " +
                                 sc::quant_format_info(format).code_rule + ", got " +
                                 (format == sc::QuantFormat::int8 ? "-128" : "255") + " at index (1, 1)";
    EXPECT_EQ(message_of([&] { sc::QuantizedFactor(format, bad.data(), 2, 3, 3, 1, scale.data()); }), expected);
  }
  const std::vector<std::int8_t> q{1, -2, 3, -4, 5, -6};
  const sc::Int8Factor named(q.data(), 2, 3, 3, 1, scale.data());
  EXPECT_EQ(named.format(), sc::QuantFormat::int8);
  EXPECT_GT(named.nbytes(), 16 * 16 + 16 * 4);  // the CPU's packing is counted too
  EXPECT_EQ(sc::Fp8Factor(codes.data(), 2, 3, 3, 1, scale.data()).format(), sc::QuantFormat::fp8_e4m3);
  // The factory gives each format's named type (the int8 one packed for the CPU at once).
  const auto made = sc::make_quantized_factor(sc::QuantFormat::int8, codes.data(), 2, 3, 3, 1, scale.data());
  ASSERT_NE(dynamic_cast<const sc::Int8Factor*>(made.get()), nullptr);
  EXPECT_EQ(made->nbytes(), named.nbytes());
  const auto made8 = sc::make_quantized_factor(sc::QuantFormat::fp8_e4m3, codes.data(), 2, 3, 3, 1, scale.data());
  ASSERT_NE(dynamic_cast<const sc::Fp8Factor*>(made8.get()), nullptr);
  EXPECT_THROW((void)sc::make_quantized_factor(static_cast<sc::QuantFormat>(9), codes.data(), 2, 3, 3, 1, scale.data()),
               std::invalid_argument);
}

/// y = act(deq(q8(σ(deq(q8(x)·S)))·U)) in float64 with σ = identity, the definition the core documents.
std::vector<double> int8_reference(const std::vector<float>& x, int rows, int d_in, const std::vector<std::int8_t>& s,
                                   const std::vector<float>& s_scale, int rank, const std::vector<std::int8_t>& u,
                                   const std::vector<float>& u_scale, int d_out) {
  const auto quantize = [](std::vector<double> row) {
    double m = 0.0;
    for (const double v : row) m = std::max(m, std::fabs(v));
    const double scale = m / 127.0;
    for (double& v : row) v = m == 0.0 ? 0.0 : std::nearbyint(v / scale);
    return std::make_pair(row, scale);
  };
  std::vector<double> y(static_cast<std::size_t>(rows * d_out));
  for (int r = 0; r < rows; ++r) {
    const auto [a, sa] = quantize(std::vector<double>(x.begin() + r * d_in, x.begin() + (r + 1) * d_in));
    std::vector<double> z(static_cast<std::size_t>(rank));
    for (int j = 0; j < rank; ++j) {
      double sum = 0.0;
      for (int i = 0; i < d_in; ++i) sum += a[i] * s[static_cast<std::size_t>(i * rank + j)];
      z[j] = sa * sum * s_scale[j];
    }
    const auto [b, sb] = quantize(z);
    for (int j = 0; j < d_out; ++j) {
      double sum = 0.0;
      for (int i = 0; i < rank; ++i) sum += b[i] * u[static_cast<std::size_t>(i * d_out + j)];
      y[static_cast<std::size_t>(r * d_out + j)] = sb * sum * u_scale[j];
    }
  }
  return y;
}

TEST(QuantizedMatmul, BothFormatsGoThroughOneEntryPoint) {
  std::mt19937 gen(61);
  std::uniform_int_distribution<int> value(-127, 127);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f), positive(0.01f, 0.1f);
  const int rows = 5, d_in = 37, rank = 9, d_out = 21;
  std::vector<float> x(rows * d_in);
  for (float& v : x) v = uniform(gen);
  std::vector<std::int8_t> s(d_in * rank), u(rank * d_out);
  for (auto& v : s) v = static_cast<std::int8_t>(value(gen));
  for (auto& v : u) v = static_cast<std::int8_t>(value(gen));
  std::vector<float> s_scale(rank), u_scale(d_out);
  for (float& v : s_scale) v = positive(gen);
  for (float& v : u_scale) v = positive(gen);
  const sc::Int8Factor S(s.data(), d_in, rank, rank, 1, s_scale.data());
  const sc::Int8Factor U(u.data(), rank, d_out, d_out, 1, u_scale.data());
  const sc::QuantizedFactor& S_any = S;
  const sc::QuantizedFactor& U_any = U;
  const sc::TensorView xv(x.data(), sc::DType::float32, {rows, d_in});
  std::vector<float> y(rows * d_out), y_named(rows * d_out);
  EXPECT_EQ(sc::quantized_sketched_matmul_output_shape(xv, S_any, U_any), (std::vector<std::int64_t>{rows, d_out}));
  sc::quantized_sketched_matmul(xv, S_any, U_any, sc::TensorView(y.data(), sc::DType::float32, {rows, d_out}));
  sc::int8_sketched_matmul(xv, S, U, sc::TensorView(y_named.data(), sc::DType::float32, {rows, d_out}));
  EXPECT_EQ(y, y_named);  // the named entry point is the same computation
  const std::vector<double> ref = int8_reference(x, rows, d_in, s, s_scale, rank, u, u_scale, d_out);
  double peak = 0.0;
  for (const double v : ref) peak = std::max(peak, std::fabs(v));
  for (std::size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], ref[i], 1e-2 * peak) << i;

  // fp8 factors through the same entry point: the CPU has no fp8 kernels, named by the format's op.
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(d_in * rank), 0x38);
  const sc::Fp8Factor F(codes.data(), d_in, rank, rank, 1, s_scale.data());
  std::vector<std::uint8_t> codes_u(static_cast<std::size_t>(rank * d_out), 0x38);
  const sc::Fp8Factor G(codes_u.data(), rank, d_out, d_out, 1, u_scale.data());
  EXPECT_EQ(message_of([&] {
              sc::quantized_sketched_matmul(xv, F, G, sc::TensorView(y.data(), sc::DType::float32, {rows, d_out}));
            }),
            "fp8_sketched_matmul: x: expected an array on a CUDA device of compute capability 8.9 or newer (there is "
            "no CPU fp8 kernel), got cpu");
  EXPECT_THROW((void)sc::quantized_matmul_output_shape(xv, F), sc::device_error);
}

TEST(QuantizedMatmul, NamesMixedFormatsAndMovedFromFactors) {
  const std::vector<std::int8_t> q(4, 1);
  const std::vector<std::uint8_t> codes(4, 0x38);
  const std::vector<float> scale{1.0f, 1.0f};
  const sc::Int8Factor S(q.data(), 2, 2, 2, 1, scale.data());
  const sc::Fp8Factor U(codes.data(), 2, 2, 2, 1, scale.data());
  std::vector<float> x(4, 1.0f);
  const sc::TensorView xv(x.data(), sc::DType::float32, {2, 2});
  EXPECT_EQ(message_of([&] { (void)sc::quantized_sketched_matmul_output_shape(xv, S, U); }),
            "int8_sketched_matmul: U: expected a factor of format int8 (the format of S), got format fp8_e4m3");
  EXPECT_EQ(message_of([&] { (void)sc::quantized_sketched_matmul_output_shape(xv, U, S); }),
            "fp8_sketched_matmul: U: expected a factor of format fp8_e4m3 (the format of S), got format int8");
  sc::Fp8Factor source(codes.data(), 2, 2, 2, 1, scale.data());
  const sc::Fp8Factor taken(std::move(source));
  EXPECT_EQ(source.format(), sc::QuantFormat::fp8_e4m3);  // NOLINT(bugprone-use-after-move): the type is still named
  EXPECT_EQ(source.nbytes(), 0);
  EXPECT_EQ(source.scales(), nullptr);
  EXPECT_EQ(message_of([&] { (void)sc::quantized_matmul_output_shape(xv, source); }),
            "fp8_matmul: W: expected a factor holding values, got a moved-from Fp8Factor");
  std::vector<float> y(4);
  sc::Epilogue inner;
  inner.inner_activation = sc::Activation::relu;
  EXPECT_EQ(message_of([&] { sc::quantized_matmul(xv, S, sc::TensorView(y.data(), sc::DType::float32, {2, 2}), inner); }),
            "int8_matmul: inner_activation: expected none (a full-rank int8 product has no inner product to apply it "
            "to), got 'relu'");
  sc::Epilogue dropout;
  dropout.dropout_p = 0.5;
  EXPECT_THROW(sc::quantized_sketched_matmul(xv, S, S, sc::TensorView(y.data(), sc::DType::float32, {2, 2}), dropout),
               std::invalid_argument);
}

}  // namespace
