// The fp8 (e4m3) host side: the encoding's round trip over every code and its rounding at the
// ties, Fp8Factor's stored layout (what the CUDA backend uploads for cuBLASLt's fp8 GEMM) and
// checks, and fp8_sketched_matmul's refusals before any device is touched. The GEMM itself runs
// only on a GPU (tests/gpu/test_gpu_fp8.py).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "detail/quantized_storage.hpp"
#include "sketchcore/errors.hpp"
#include "sketchcore/fp8_matmul.hpp"
#include "sketchcore/gated_paths.hpp"
#include "sketchcore/runtime.hpp"

namespace sc = sketchcore;

namespace {

bool is_nan_code(int code) { return (code & 0x7F) == 0x7F; }

TEST(Fp8E4m3, EveryFiniteCodeRoundTripsAndTheNaNCodesDecodeToNaN) {
  for (int code = 0; code < 256; ++code) {
    const float value = sc::e4m3_to_float(static_cast<std::uint8_t>(code));
    if (is_nan_code(code)) {
      EXPECT_TRUE(std::isnan(value)) << code;
    } else {
      EXPECT_EQ(sc::float_to_e4m3(value), code) << code << " " << value;
    }
  }
  EXPECT_EQ(sc::e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(sc::e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(sc::e4m3_to_float(0x08), std::ldexp(1.0f, -6));
}

TEST(Fp8E4m3, TiesGoToTheEvenCodeAndLargeValuesSaturate) {
  EXPECT_EQ(sc::float_to_e4m3(1.0625f), 0x38);  // between 1 (0x38) and 1.125 (0x39)
  EXPECT_EQ(sc::float_to_e4m3(1.1875f), 0x3A);  // between 1.125 (0x39) and 1.25 (0x3A)
  EXPECT_EQ(sc::float_to_e4m3(std::ldexp(1.0f, -10)), 0x00);       // half the smallest subnormal
  EXPECT_EQ(sc::float_to_e4m3(3 * std::ldexp(1.0f, -10)), 0x02);   // between 0x01 and 0x02
  EXPECT_EQ(sc::float_to_e4m3(464.0f), 0x7E);
  EXPECT_EQ(sc::float_to_e4m3(-std::numeric_limits<float>::infinity()), 0xFE);
  EXPECT_EQ(sc::float_to_e4m3(std::nanf("")), 0x7F);
  EXPECT_EQ(sc::float_to_e4m3(-0.0f), 0x80);
}

TEST(Fp8Factor, StoresColumnsContiguouslyPaddedWithZeros) {
  const std::int64_t rows = 19, cols = 3;
  std::vector<std::uint8_t> codes(rows * cols);
  for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<std::uint8_t>((i * 37 + 1) % 0x7F);
  const std::vector<float> scale{0.5f, 0.0f, 2.0f};
  const sc::Fp8Factor f(codes.data(), rows, cols, cols, 1, scale.data());
  const sc::Fp8Factor::Storage& s = f.storage();
  ASSERT_EQ(s.k_pad, 32);
  ASSERT_EQ(s.n_pad, 16);
  EXPECT_EQ(f.nbytes(), 32 * 16 + 16 * 4);
  for (std::int64_t j = 0; j < s.n_pad; ++j) {
    EXPECT_EQ(s.scales[j], j < cols ? scale[j] : 0.0f);
    for (std::int64_t i = 0; i < s.k_pad; ++i) {
      const std::uint8_t expected = (i < rows && j < cols) ? codes[i * cols + j] : 0;
      EXPECT_EQ(s.codes[j * s.k_pad + i], expected) << i << ", " << j;
    }
  }
  std::vector<std::uint8_t> back(codes.size());
  f.unpack(back.data());
  EXPECT_EQ(back, codes);
}

TEST(Fp8Factor, RefusesNaNCodesAndBadScales) {
  std::vector<std::uint8_t> codes{0x38, 0xFF, 0x00, 0x01};
  const std::vector<float> scale{1.0f, 1.0f};
  try {
    sc::Fp8Factor(codes.data(), 2, 2, 2, 1, scale.data());
    FAIL() << "a NaN code was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "Fp8Factor: codes: expected finite e4m3 codes (not 0x7f or 0xff, the NaNs), got 255 at "
                           "index (0, 1)");
  }
  codes[1] = 0x10;
  const std::vector<float> negative{1.0f, -2.0f};
  EXPECT_THROW(sc::Fp8Factor(codes.data(), 2, 2, 2, 1, negative.data()), std::invalid_argument);
  EXPECT_THROW(sc::Fp8Factor(codes.data(), -1, 2, 2, 1, scale.data()), sc::shape_error);
}

TEST(Fp8Factor, AMovedFromFactorIsRefusedByName) {
  std::vector<std::uint8_t> codes(4, 0x38);
  const std::vector<float> scale{1.0f, 1.0f};
  sc::Fp8Factor source(codes.data(), 2, 2, 2, 1, scale.data());
  const sc::Fp8Factor taken(std::move(source));
  EXPECT_TRUE(taken.valid());
  EXPECT_FALSE(source.valid());  // NOLINT(bugprone-use-after-move): what this test is about
  std::vector<std::uint8_t> back(4, 7);
  source.unpack(back.data());  // writes nothing
  EXPECT_EQ(back, std::vector<std::uint8_t>(4, 7));
  std::vector<float> x(4), y(4);
  try {
    (void)sc::fp8_sketched_matmul_output_shape(sc::TensorView(x.data(), sc::DType::float32, {2, 2}), taken, source);
    FAIL() << "a moved-from factor was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "fp8_sketched_matmul: U: expected a factor holding values, got a moved-from Fp8Factor");
  }
}

TEST(Fp8Matmul, RefusesTheCpuAndChecksArgumentsBeforeAnyDevice) {
  std::vector<std::uint8_t> codes(4, 0x38);
  const std::vector<float> scale{1.0f, 1.0f};
  const sc::Fp8Factor f(codes.data(), 2, 2, 2, 1, scale.data());
  std::vector<float> x(4, 1.0f), y(4);
  try {
    sc::fp8_sketched_matmul(sc::TensorView(x.data(), sc::DType::float32, {2, 2}), f, f,
                            sc::TensorView(y.data(), sc::DType::float32, {2, 2}));
    FAIL() << "the CPU was accepted";
  } catch (const sc::device_error& e) {
    EXPECT_STREQ(e.what(), "fp8_sketched_matmul: x: expected an array on a CUDA device of compute capability 8.9 "
                           "or newer (there is no CPU fp8 kernel), got cpu");
  }
  // Host memory labelled as CUDA memory: shapes first, then a CPU-only build refuses the device and
  // a CUDA build the closed gated path, before anything touches a device.
  const sc::Device gpu{sc::DeviceType::cuda, 0};
  std::vector<float> x3(6, 1.0f);
  EXPECT_THROW(sc::fp8_sketched_matmul(sc::TensorView(x3.data(), sc::DType::float32, {2, 3}, {}, gpu), f, f,
                                       sc::TensorView(y.data(), sc::DType::float32, {2, 2}, {}, gpu)),
               sc::shape_error);
  const auto on_gpu = [&] {
    sc::fp8_sketched_matmul(sc::TensorView(x.data(), sc::DType::float32, {2, 2}, {}, gpu), f, f,
                            sc::TensorView(y.data(), sc::DType::float32, {2, 2}, {}, gpu));
  };
  if (!sc::build_info().cuda) {
    EXPECT_THROW(on_gpu(), sc::device_error);
    return;
  }
  const sc::ScopedGatedPath closed(sc::GatedPath::cuda_fp8_factors, false);
  try {
    on_gpu();
    FAIL() << "the closed gate let the call through";
  } catch (const sc::unverified_path_error& e) {
    EXPECT_NE(std::string(e.what()).find("fp8_sketched_matmul on a CUDA device: this runs the gated path "
                                         "'cuda_fp8_factors'"),
              std::string::npos);
  }
  if (sc::cuda_device_count() == 0) {  // open, without a device: the CUDA runtime's error, never a crash
    const sc::ScopedGatedPath open(sc::GatedPath::cuda_fp8_factors, true);
    EXPECT_THROW(on_gpu(), sc::cuda_error);
  }
}

}  // namespace
