// The C++ sketch API: validation, block consistency, thread-count invariance, and
// application against the dense operator.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "sketchcore/sketchcore.hpp"

using sketchcore::DType;
using sketchcore::SketchKind;
using sketchcore::SketchOperator;
using sketchcore::TensorView;

namespace {

SketchOperator make(SketchKind kind, std::int64_t m, std::int64_t n, std::int64_t nnz = 3) {
  SketchOperator op;
  op.kind = kind;
  op.rows = m;
  op.cols = n;
  op.seed = 0x123456789abcdefULL;
  op.nnz = nnz;
  return op;
}

std::vector<double> dense(const SketchOperator& op) {
  std::vector<double> d(static_cast<std::size_t>(op.rows * op.cols));
  sketchcore::sketch_to_dense(op, TensorView(d.data(), DType::float64, {op.rows, op.cols}));
  return d;
}

constexpr SketchKind kAll[] = {SketchKind::gaussian,    SketchKind::rademacher,  SketchKind::uniform,
                               SketchKind::sparse_sign, SketchKind::countsketch, SketchKind::srht};

TEST(Sketch, BlocksEqualTheWholeForEveryKind) {
  for (SketchKind kind : kAll) {
    const auto op = make(kind, 19, 45);
    const auto whole = dense(op);
    std::vector<double> block(5 * 7);
    sketchcore::sketch_to_dense(op, TensorView(block.data(), DType::float64, {5, 7}), 11, 30);
    for (int i = 0; i < 5; ++i) {
      for (int j = 0; j < 7; ++j) {
        EXPECT_EQ(block[i * 7 + j], whole[(11 + i) * 45 + 30 + j]) << sketchcore::sketch_kind_name(kind);
      }
    }
  }
}

TEST(Sketch, BitsDoNotDependOnThreadCount) {
  const int before = sketchcore::get_num_threads();
  for (SketchKind kind : kAll) {
    const auto op = make(kind, 64, 3000);
    sketchcore::set_num_threads(1);
    const auto one = dense(op);
    sketchcore::set_num_threads(3);
    EXPECT_EQ(one, dense(op)) << sketchcore::sketch_kind_name(kind);
  }
  sketchcore::set_num_threads(before);
}

TEST(Sketch, ApplyOnBothSidesMatchesTheDenseOperator) {
  for (SketchKind kind : kAll) {
    const auto op = make(kind, 12, 40);
    const auto d = dense(op);
    std::vector<double> a(40 * 3), left(12 * 3), b(2 * 12), right(2 * 40);
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = std::sin(double(i));
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = std::cos(double(i));
    sketchcore::sketch_apply(op, TensorView(a.data(), DType::float64, {40, 3}),
                             TensorView(left.data(), DType::float64, {12, 3}));
    sketchcore::sketch_apply(op, TensorView(b.data(), DType::float64, {2, 12}),
                             TensorView(right.data(), DType::float64, {2, 40}), sketchcore::Side::right);
    for (int i = 0; i < 12; ++i) {
      for (int c = 0; c < 3; ++c) {
        double ref = 0;
        for (int j = 0; j < 40; ++j) ref += d[i * 40 + j] * a[j * 3 + c];
        EXPECT_NEAR(left[i * 3 + c], ref, 1e-12) << sketchcore::sketch_kind_name(kind);
      }
    }
    for (int r = 0; r < 2; ++r) {
      for (int j = 0; j < 40; ++j) {
        double ref = 0;
        for (int i = 0; i < 12; ++i) ref += b[r * 12 + i] * d[i * 40 + j];
        EXPECT_NEAR(right[r * 40 + j], ref, 1e-12) << sketchcore::sketch_kind_name(kind);
      }
    }
  }
}

TEST(Sketch, InvalidOperatorsAndOperandsAreRefused) {
  EXPECT_THROW(sketchcore::validate_sketch(make(SketchKind::gaussian, 0, 5)), std::invalid_argument);
  EXPECT_THROW(sketchcore::validate_sketch(make(SketchKind::sparse_sign, 4, 5, 5)), std::invalid_argument);
  EXPECT_THROW(sketchcore::validate_sketch(make(SketchKind::srht, 9, 8)), std::invalid_argument);
  EXPECT_THROW(sketchcore::parse_sketch_kind("fourier"), std::invalid_argument);
  std::vector<double> a(10), out(10);
  EXPECT_THROW(sketchcore::sketch_apply(make(SketchKind::gaussian, 4, 6), TensorView(a.data(), DType::float64, {5, 2}),
                                        TensorView(out.data(), DType::float64, {4, 2})),
               sketchcore::shape_error);
  std::vector<double> block(4);
  EXPECT_THROW(sketchcore::sketch_to_dense(make(SketchKind::uniform, 4, 6), TensorView(block.data(), DType::float64, {2, 2}), 3, 0),
               sketchcore::shape_error);
}

}  // namespace

