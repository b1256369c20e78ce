#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <vector>

#include "reference.hpp"

using sketchcore::Activation;
using sketchcore::DType;
using sketchcore::TensorView;
using namespace sketchcore_test;

namespace {

template <class T>
constexpr DType dtype_of() {
  return sizeof(T) == 4 ? DType::float32 : DType::float64;
}

// (rows, d_in, terms, k, d_out, activation, with bias)
using Case = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, Activation, bool>;

template <class T>
void check_against_reference(const Case& c, double tolerance, std::uint64_t seed) {
  const auto [rows, d_in, terms, k, d_out, act, with_bias] = c;
  std::mt19937_64 gen(seed);
  const auto x = random_vector(rows * d_in, gen), S = random_vector(terms * d_in * k, gen),
             U = random_vector(terms * k * d_out, gen), b = random_vector(d_out, gen);
  auto xt = cast<T>(x), St = cast<T>(S), Ut = cast<T>(U), bt = cast<T>(b);
  std::vector<T> y(static_cast<std::size_t>(rows * d_out), T(-7));
  sketchcore::Epilogue epi;
  epi.scale = 0.75;
  epi.activation = act;
  if (with_bias) epi.bias = TensorView(bt.data(), dtype_of<T>(), {d_out});
  sketchcore::sketched_matmul(TensorView(xt.data(), dtype_of<T>(), {rows, d_in}),
                              TensorView(St.data(), dtype_of<T>(), {terms, d_in, k}),
                              TensorView(Ut.data(), dtype_of<T>(), {terms, k, d_out}),
                              TensorView(y.data(), dtype_of<T>(), {rows, d_out}), epi);
  // Reference on the values actually passed (rounded to T).
  const std::vector<double> xr(xt.begin(), xt.end()), Sr(St.begin(), St.end()), Ur(Ut.begin(), Ut.end()),
      br(bt.begin(), bt.end());
  const auto ref = reference(xr, Sr, Ur, with_bias ? &br : nullptr, rows, d_in, terms, k, d_out, 0.75, act);
  EXPECT_LT(relative_error(y, ref), tolerance);
}

class SketchedMatmulCases : public ::testing::TestWithParam<Case> {};

TEST_P(SketchedMatmulCases, Float64MatchesReference) { check_against_reference<double>(GetParam(), 1e-12, 1); }
TEST_P(SketchedMatmulCases, Float32MatchesReference) { check_against_reference<float>(GetParam(), 1e-5, 2); }

INSTANTIATE_TEST_SUITE_P(
    Shapes, SketchedMatmulCases,
    ::testing::Values(Case{1, 1, 1, 1, 1, Activation::none, false}, Case{7, 13, 3, 5, 11, Activation::relu, true},
                      Case{33, 64, 1, 8, 17, Activation::gelu, true}, Case{5, 9, 4, 2, 3, Activation::gelu_tanh, false},
                      Case{64, 40, 2, 16, 70, Activation::silu, true}, Case{3, 200, 8, 1, 2, Activation::none, true}));

TEST(SketchedMatmul, StridedRowsAndColumnMajorOperandsMatchCompact) {
  // x rows with padding (row stride 10 for d_in 6), S given column-major, U with padded rows,
  // out written into every other column of a wider buffer.
  std::mt19937_64 gen(3);
  const std::int64_t rows = 4, d_in = 6, k = 3, d_out = 5;
  auto xbuf = random_vector(rows * 10, gen), Sdata = random_vector(d_in * k, gen), Ubuf = random_vector(k * 8, gen);
  std::vector<double> x(rows * d_in), U(k * d_out), S(d_in * k);
  for (int i = 0; i < rows; ++i)
    for (int c = 0; c < d_in; ++c) x[i * d_in + c] = xbuf[i * 10 + c];
  for (int c = 0; c < d_in; ++c)
    for (int j = 0; j < k; ++j) S[c * k + j] = Sdata[j * d_in + c];  // Sdata is column-major
  for (int j = 0; j < k; ++j)
    for (int o = 0; o < d_out; ++o) U[j * d_out + o] = Ubuf[j * 8 + o];
  std::vector<double> out(rows * d_out * 2, 99.0);
  sketchcore::sketched_matmul(TensorView(xbuf.data(), DType::float64, {rows, d_in}, {10, 1}),
                              TensorView(Sdata.data(), DType::float64, {d_in, k}, {1, d_in}),
                              TensorView(Ubuf.data(), DType::float64, {k, d_out}, {8, 1}),
                              TensorView(out.data(), DType::float64, {rows, d_out}, {2 * d_out, 2}));
  const auto ref = reference(x, S, U, nullptr, rows, d_in, 1, k, d_out, 1.0, Activation::none);
  for (int i = 0; i < rows; ++i) {
    for (int o = 0; o < d_out; ++o) {
      EXPECT_NEAR(out[i * 2 * d_out + 2 * o], ref[i * d_out + o], 1e-12);
      EXPECT_EQ(out[i * 2 * d_out + 2 * o + 1], 99.0) << "wrote between the columns of out";
    }
  }
}

TEST(SketchedMatmul, ZeroRowsWritesNothing) {
  double S[6] = {}, U[6] = {};
  double sentinel = 5.0;
  sketchcore::sketched_matmul(TensorView(nullptr, DType::float64, {0, 3}), TensorView(S, DType::float64, {3, 2}),
                              TensorView(U, DType::float64, {2, 3}), TensorView(&sentinel, DType::float64, {0, 3}));
  EXPECT_EQ(sentinel, 5.0);
}

TEST(SketchedMatmul, ZeroRankGivesActivationOfBias) {
  double x[6] = {1, 2, 3, 4, 5, 6}, bias[2] = {-1.0, 2.0}, y[6] = {};
  sketchcore::Epilogue epi;
  epi.bias = TensorView(bias, DType::float64, {2});
  epi.activation = Activation::relu;
  sketchcore::sketched_matmul(TensorView(x, DType::float64, {3, 2}), TensorView(nullptr, DType::float64, {2, 0}),
                              TensorView(nullptr, DType::float64, {0, 2}), TensorView(y, DType::float64, {3, 2}), epi);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(y[2 * i], 0.0);
    EXPECT_EQ(y[2 * i + 1], 2.0);
  }
}

TEST(SketchedMatmul, OutputShapeKeepsLeadingDimensions) {
  float dummy[1];
  const auto shape = sketchcore::sketched_matmul_output_shape(
      TensorView(dummy, DType::float32, {2, 3, 4, 8}), TensorView(dummy, DType::float32, {3, 8, 5}),
      TensorView(dummy, DType::float32, {3, 5, 7}));
  EXPECT_EQ(shape, (std::vector<std::int64_t>{2, 3, 4, 7}));
}

}  // namespace
