#include <cstdint>
#include <gtest/gtest.h>
#include <stdexcept>
#include <string>
#include <vector>

#include "sketchcore/sketchcore.hpp"

using sketchcore::DType;
using sketchcore::TensorView;

TEST(TensorView, EmptyStridesMeanRowMajor) {
  float data[24];
  TensorView v(data, DType::float32, {2, 3, 4});
  EXPECT_EQ(v.strides(), (std::vector<std::int64_t>{12, 4, 1}));
  EXPECT_EQ(v.numel(), 24);
  EXPECT_EQ(v.ndim(), 3);
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_EQ(v.size(-1), 4);
  EXPECT_EQ(v.stride(0), 12);
}

TEST(TensorView, ZeroExtentGivesZeroElements) {
  TensorView v(nullptr, DType::float64, {3, 0, 5});
  EXPECT_EQ(v.numel(), 0);
  EXPECT_TRUE(v.is_contiguous());
}

TEST(TensorView, StridedViewIsNotContiguous) {
  float data[24];
  TensorView v(data, DType::float32, {4, 3}, {6, 2});
  EXPECT_FALSE(v.is_contiguous());
}

TEST(TensorView, RejectsNegativeExtent) {
  EXPECT_THROW(TensorView(nullptr, DType::float32, {2, -1}), sketchcore::shape_error);
}

TEST(TensorView, RejectsStrideCountMismatch) {
  float data[4];
  try {
    TensorView(data, DType::float32, {2, 2}, {2});
    FAIL() << "no exception";
  } catch (const sketchcore::shape_error& e) {
    EXPECT_NE(std::string(e.what()).find("strides"), std::string::npos) << e.what();
  }
}

TEST(TensorView, RejectsOutOfRangeDimension) {
  float data[4];
  TensorView v(data, DType::float32, {2, 2});
  EXPECT_THROW(v.size(2), sketchcore::shape_error);
  EXPECT_THROW(v.stride(-3), sketchcore::shape_error);
}

TEST(DTypes, NamesAndSizes) {
  EXPECT_STREQ(sketchcore::dtype_name(DType::float32), "float32");
  EXPECT_STREQ(sketchcore::dtype_name(DType::bfloat16), "bfloat16");
  EXPECT_EQ(sketchcore::dtype_size(DType::float64), 8u);
  EXPECT_EQ(sketchcore::dtype_size(DType::float16), 2u);
  EXPECT_EQ(sketchcore::shape_to_string({3}), "(3,)");
  EXPECT_EQ(sketchcore::shape_to_string({2, 5}), "(2, 5)");
  EXPECT_EQ(sketchcore::device_name({sketchcore::DeviceType::cuda, 1}), "cuda:1");
}

TEST(Activations, ParseRoundTripsEveryName) {
  for (const char* name : {"none", "relu", "gelu", "gelu_tanh", "silu"}) {
    EXPECT_STREQ(sketchcore::activation_name(sketchcore::parse_activation(name)), name);
  }
}

TEST(Activations, UnknownNameIsInvalidArgumentNamingIt) {
  try {
    sketchcore::parse_activation("tanh");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("activation"), std::string::npos) << m;
    EXPECT_NE(m.find("'tanh'"), std::string::npos) << m;
    EXPECT_NE(m.find("'gelu_tanh'"), std::string::npos) << m;
  }
}
