// Every validation error of sketched_matmul: the right exception type, and a message that
// names the argument, the expected and the actual value.
#include <gtest/gtest.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "sketchcore/sketchcore.hpp"

using sketchcore::DType;
using sketchcore::TensorView;

namespace {

float buf[4096];
float other[4096];

template <class Error>
void expect_error(const std::function<void()>& call, std::initializer_list<const char*> fragments) {
  try {
    call();
    FAIL() << "no exception";
  } catch (const Error& e) {
    const std::string m = e.what();
    for (const char* f : fragments) EXPECT_NE(m.find(f), std::string::npos) << "'" << f << "' not in: " << m;
  } catch (const std::exception& e) {
    FAIL() << "wrong exception type: " << e.what();
  }
}

TensorView f32(std::vector<std::int64_t> shape, float* data = buf) { return TensorView(data, DType::float32, shape); }

void run(const TensorView& x, const TensorView& S, const TensorView& U, const TensorView& out,
         const sketchcore::Epilogue& e = {}) {
  sketchcore::sketched_matmul(x, S, U, out, e);
}

TEST(Errors, DinMismatch) {
  expect_error<sketchcore::shape_error>([] { run(f32({4, 9}), f32({8, 2}), f32({2, 3}), f32({4, 3}, other)); },
                                        {"x", "d_in = 8", "(4, 9)"});
}
TEST(Errors, KMismatch) {
  expect_error<sketchcore::shape_error>([] { run(f32({4, 8}), f32({8, 2}), f32({3, 3}), f32({4, 3}, other)); },
                                        {"U", "k = 2", "(3, 3)"});
}
TEST(Errors, TermsMismatch) {
  expect_error<sketchcore::shape_error>(
      [] { run(f32({4, 8}), f32({2, 8, 2}), f32({3, 2, 3}), f32({4, 3}, other)); }, {"U", "T = 2", "(3, 2, 3)"});
}
TEST(Errors, TwoDimensionalSWithThreeDimensionalU) {
  expect_error<sketchcore::shape_error>([] { run(f32({4, 8}), f32({8, 2}), f32({1, 2, 3}), f32({4, 3}, other)); },
                                        {"U", "2-D", "(1, 2, 3)"});
}
TEST(Errors, SWithWrongRank) {
  expect_error<sketchcore::shape_error>([] { run(f32({4, 8}), f32({8}), f32({2, 3}), f32({4, 3}, other)); },
                                        {"S", "(d_in, k) or (T, d_in, k)", "(8,)"});
}
TEST(Errors, ZeroDimensionalX) {
  expect_error<sketchcore::shape_error>([] { run(f32({}), f32({1, 2}), f32({2, 3}), f32({3}, other)); },
                                        {"x", "at least 1 dimension", "()"});
}
TEST(Errors, OutShape) {
  expect_error<sketchcore::shape_error>([] { run(f32({4, 8}), f32({8, 2}), f32({2, 3}), f32({4, 4}, other)); },
                                        {"out", "(4, 3)", "(4, 4)"});
}
TEST(Errors, BiasLength) {
  sketchcore::Epilogue e;
  float bias[5];
  e.bias = f32({5}, bias);
  expect_error<sketchcore::shape_error>([&] { run(f32({4, 8}), f32({8, 2}), f32({2, 3}), f32({4, 3}, other), e); },
                                        {"bias", "(3,)", "(5,)"});
}
TEST(Errors, MixedDtypes) {
  double d[64];
  expect_error<sketchcore::dtype_error>(
      [&] { run(f32({4, 8}), TensorView(d, DType::float64, {8, 2}), f32({2, 3}), f32({4, 3}, other)); },
      {"S", "float32", "float64"});
}
TEST(Errors, DifferentDevices) {
  const sketchcore::Device gpu{sketchcore::DeviceType::cuda, 0};
  expect_error<sketchcore::device_error>(
      [&] { run(f32({4, 8}), TensorView(buf, DType::float32, {8, 2}, {}, gpu), f32({2, 3}), f32({4, 3}, other)); },
      {"S", "cpu", "cuda:0"});
}
TEST(Errors, CudaOperandsWithoutCudaBackendOrDevice) {
  const sketchcore::Device gpu{sketchcore::DeviceType::cuda, 0};
  auto v = [&](std::vector<std::int64_t> s, float* p) { return TensorView(p, DType::float32, s, {}, gpu); };
  if (!sketchcore::build_info().cuda) {
    expect_error<sketchcore::device_error>([&] { run(v({4, 8}, buf), v({8, 2}, buf), v({2, 3}, buf), v({4, 3}, other)); },
                                           {"x", "CPU", "cuda:0", "no CUDA backend"});
  } else if (sketchcore::cuda_device_count() == 0) {
    // Validated, dispatched, and refused by the CUDA runtime: an exception, not a crash.
    expect_error<sketchcore::cuda_error>([&] { run(v({4, 8}, buf), v({8, 2}, buf), v({2, 3}, buf), v({4, 3}, other)); },
                                         {"sketchcore: cuda"});
  }
  // Either way, operands on different devices are refused before any device is touched.
  expect_error<sketchcore::device_error>([&] { run(v({4, 8}, buf), f32({8, 2}), v({2, 3}, buf), v({4, 3}, other)); },
                                         {"S", "cuda:0", "cpu"});
}
TEST(Errors, OutOverlappingInput) {
  expect_error<std::invalid_argument>([] { run(f32({4, 8}), f32({8, 2}, other), f32({2, 8}, other + 100), f32({4, 8})); },
                                      {"out", "disjoint", "overlapping x"});
}
TEST(Errors, OutWithRepeatedElements) {
  expect_error<std::invalid_argument>(
      [] { run(f32({4, 8}), f32({8, 2}), f32({2, 3}), TensorView(other, DType::float32, {4, 3}, {0, 1})); },
      {"out", "do not share memory", "(0, 1)"});
}
TEST(Errors, NonFiniteScale) {
  sketchcore::Epilogue e;
  e.scale = std::numeric_limits<double>::infinity();
  expect_error<std::invalid_argument>([&] { run(f32({4, 8}), f32({8, 2}), f32({2, 3}), f32({4, 3}, other), e); },
                                      {"scale", "finite", "inf"});
}
TEST(Errors, UnknownInnerActivationEnumerator) {
  sketchcore::Epilogue e;
  e.inner_activation = static_cast<sketchcore::Activation>(17);  // as a C caller could pass it
  expect_error<std::invalid_argument>([&] { run(f32({4, 8}), f32({8, 2}), f32({2, 3}), f32({4, 3}, other), e); },
                                      {"inner_activation", "one of none, relu, gelu, gelu_tanh, silu", "17"});
}

}  // namespace
