// The int8 sketched GEMM through the public API (include/sketchcore/int8_matmul.hpp): every kernel
// family this CPU runs against a reference of the same quantized math (exact int64 sums, float32
// dequantization as documented), with row counts and extents around the kernels' blocking
// (6 rows, 64-column panels, 4-row groups), the factor's round trip, the GEMM benchmark hook, and
// the error paths; the full-rank int8_matmul against a float64 reference of its documented math.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "sketchcore/errors.hpp"
#include "sketchcore/gated_paths.hpp"
#include "sketchcore/int8_matmul.hpp"
#include "sketchcore/runtime.hpp"
#include "reference.hpp"

namespace sc = sketchcore;

namespace {

struct Quantized {
  std::vector<std::int64_t> q;  // rows × cols
  std::vector<float> scale;     // per row
};

/// Per-row symmetric quantization, float32 arithmetic as documented.
Quantized quantize_rows(const std::vector<float>& x, std::int64_t rows, std::int64_t cols) {
  Quantized r{std::vector<std::int64_t>(static_cast<std::size_t>(rows * cols)), std::vector<float>(rows)};
  for (std::int64_t i = 0; i < rows; ++i) {
    float max_abs = 0;
    for (std::int64_t j = 0; j < cols; ++j) max_abs = std::max(max_abs, std::fabs(x[i * cols + j]));
    r.scale[i] = max_abs / 127.0f;
    const float inverse = 127.0f / max_abs;
    for (std::int64_t j = 0; j < cols && max_abs > 0; ++j) {
      r.q[i * cols + j] = static_cast<std::int64_t>(std::clamp(std::nearbyint(x[i * cols + j] * inverse), -127.0f, 127.0f));
    }
  }
  return r;
}

struct Factor {
  std::vector<std::int8_t> q;
  std::vector<float> scale;
  std::int64_t rows, cols;
};

Factor random_factor(std::int64_t rows, std::int64_t cols, std::mt19937& gen) {
  Factor f{std::vector<std::int8_t>(static_cast<std::size_t>(rows * cols)), std::vector<float>(cols), rows, cols};
  std::uniform_int_distribution<int> value(-127, 127);
  std::uniform_real_distribution<float> scale(0.001f, 0.02f);
  for (auto& v : f.q) v = static_cast<std::int8_t>(value(gen));
  for (auto& s : f.scale) s = scale(gen);
  return f;
}

/// deq(a · f): float32(Σ) · (row scale · column scale).
std::vector<float> product(const Quantized& a, std::int64_t rows, const Factor& f) {
  std::vector<float> out(static_cast<std::size_t>(rows * f.cols));
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < f.cols; ++j) {
      std::int64_t sum = 0;
      for (std::int64_t k = 0; k < f.rows; ++k) sum += a.q[i * f.rows + k] * f.q[k * f.cols + j];
      out[i * f.cols + j] = static_cast<float>(sum) * (a.scale[i] * f.scale[j]);
    }
  }
  return out;
}

std::vector<float> reference(const std::vector<float>& x, std::int64_t rows, const Factor& S, const Factor& U,
                             const std::vector<float>& bias) {
  std::vector<float> z = product(quantize_rows(x, rows, S.rows), rows, S);
  for (auto& v : z) v = std::max(v, 0.0f);  // inner relu
  std::vector<float> y = product(quantize_rows(z, rows, S.cols), rows, U);
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < U.cols; ++j) y[i * U.cols + j] += bias[j];
  }
  return y;
}

sc::Int8Factor pack(const Factor& f) { return sc::Int8Factor(f.q.data(), f.rows, f.cols, f.cols, 1, f.scale.data()); }

TEST(Int8Matmul, EveryKernelFamilyMatchesTheQuantizedReference) {
  std::mt19937 gen(7);
  std::normal_distribution<float> normal;
  const std::string before = sc::int8_gemm_isa();
  for (const char* isa : {"amx", "avx512_vnni", "avx_vnni", "avx2", "portable"}) {
    if (!sc::int8_gemm_isa_supported(isa)) continue;
    sc::set_int8_gemm_isa(isa);
    for (std::int64_t rows : {1, 5, 6, 7, 13, 50}) {
      for (auto [d_in, rank, d_out] : {std::array<std::int64_t, 3>{1, 1, 1}, {70, 33, 130}, {64, 64, 64}, {9, 5, 200}}) {
        const Factor S = random_factor(d_in, rank, gen), U = random_factor(rank, d_out, gen);
        std::vector<float> x(static_cast<std::size_t>(rows * d_in)), bias(static_cast<std::size_t>(d_out));
        for (auto& v : x) v = normal(gen);
        for (auto& v : bias) v = normal(gen);
        std::vector<float> y(static_cast<std::size_t>(rows * d_out), std::nanf(""));
        sc::Epilogue e;
        e.inner_activation = sc::Activation::relu;
        e.bias = sc::TensorView(bias.data(), sc::DType::float32, {d_out});
        const sc::Int8Factor s = pack(S), u = pack(U);
        sc::int8_sketched_matmul(sc::TensorView(x.data(), sc::DType::float32, {rows, d_in}), s, u,
                                 sc::TensorView(y.data(), sc::DType::float32, {rows, d_out}), e);
        const std::vector<float> ref = reference(x, rows, S, U, bias);
        for (std::size_t i = 0; i < y.size(); ++i) {
          ASSERT_NEAR(y[i], ref[i], 1e-5f * (1.0f + std::fabs(ref[i]))) << isa << " rows " << rows << " d_in " << d_in;
        }
      }
    }
  }
  sc::set_int8_gemm_isa(before);
}

TEST(Int8Matmul, FactorRoundTripsAndCountsItsBytes) {
  std::mt19937 gen(3);
  const Factor f = random_factor(10, 70, gen);
  const sc::Int8Factor packed = pack(f);
  EXPECT_EQ(packed.rows(), 10);
  EXPECT_EQ(packed.cols(), 70);
  // The stored codes and scales (16 × 80 padded), then the CPU's packing: 2 panels × 3 row groups,
  // scales, column sums.
  EXPECT_EQ(packed.nbytes(), 16 * 80 + 80 * 4 + 2 * 3 * 256 + 2 * 128 * 4);
  std::vector<std::int8_t> back(f.q.size());
  packed.unpack(back.data());
  EXPECT_EQ(back, f.q);
  EXPECT_EQ(std::vector<float>(packed.scales(), packed.scales() + 70), f.scale);
}

TEST(Int8Matmul, AMovedFromFactorIsRefusedByName) {
  std::vector<std::int8_t> q{1, 2, 3, 4};
  const std::vector<float> scale{1.0f, 2.0f};
  sc::Int8Factor source(q.data(), 2, 2, 2, 1, scale.data());
  const sc::Int8Factor taken(std::move(source));
  EXPECT_TRUE(taken.valid());
  EXPECT_FALSE(source.valid());  // NOLINT(bugprone-use-after-move): what this test is about
  EXPECT_EQ(source.rows(), 0);
  std::vector<std::int8_t> back(4, 7);
  source.unpack(back.data());  // writes nothing
  EXPECT_EQ(back, std::vector<std::int8_t>(4, 7));
  std::vector<float> x(4), y(4);
  for (const bool moved_is_s : {true, false}) {
    try {
      sc::int8_sketched_matmul(sc::TensorView(x.data(), sc::DType::float32, {2, 2}), moved_is_s ? source : taken,
                               moved_is_s ? taken : source, sc::TensorView(y.data(), sc::DType::float32, {2, 2}));
      FAIL() << "a moved-from factor was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), std::string("int8_sketched_matmul: ") + (moved_is_s ? "S" : "U") +
                                           ": expected a factor holding values, got a moved-from Int8Factor");
    }
  }
}

TEST(Int8Matmul, GemmBenchHookTimesOneDequantizedProduct) {
  std::mt19937 gen(11);
  std::normal_distribution<float> normal;
  const std::string before = sc::int8_gemm_isa();
  const Factor S = random_factor(70, 130, gen);
  const sc::Int8Factor s = pack(S);
  for (const char* isa : {"amx", "avx512_vnni", "avx_vnni", "avx2", "portable"}) {
    if (!sc::int8_gemm_isa_supported(isa)) continue;
    sc::set_int8_gemm_isa(isa);
    const std::int64_t rows = 37;
    std::vector<float> x(static_cast<std::size_t>(rows * S.rows)), out(static_cast<std::size_t>(rows * S.cols), 0.0f);
    for (auto& v : x) v = normal(gen);
    const std::vector<double> seconds = sc::int8_gemm_seconds_for_bench(x.data(), rows, s, out.data(), 3);
    EXPECT_EQ(seconds.size(), 3u) << isa;
    for (double t : seconds) EXPECT_GE(t, 0.0) << isa;
    const std::vector<float> ref = product(quantize_rows(x, rows, S.rows), rows, S);
    for (std::size_t i = 0; i < out.size(); ++i) {
      ASSERT_NEAR(out[i], ref[i], 1e-5f * (1.0f + std::fabs(ref[i]))) << isa << " element " << i;
    }
  }
  sc::set_int8_gemm_isa(before);
  std::vector<float> x(70), out(130);
  for (auto [rows, repeats, message] : {std::tuple<std::int64_t, std::int64_t, const char*>{
                                            -1, 1, "int8_gemm_seconds_for_bench: rows: expected rows >= 0, got -1"},
                                        {1, 0, "int8_gemm_seconds_for_bench: repeats: expected repeats >= 1, got 0"}}) {
    try {
      sc::int8_gemm_seconds_for_bench(x.data(), rows, s, out.data(), repeats);
      FAIL() << message;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }  sc::Int8Factor source = pack(S);
  const sc::Int8Factor taken(std::move(source));
  try {
    sc::int8_gemm_seconds_for_bench(x.data(), 1, source, out.data(), 1);  // NOLINT(bugprone-use-after-move)
    FAIL() << "a moved-from factor was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("factor: expected a factor holding values, got a moved-from Int8Factor"),
              std::string::npos) << e.what();
  }
}

TEST(Int8Matmul, ErrorsNameTheArgument) {
  std::vector<std::int8_t> q{1, -128, 3, 4};
  std::vector<float> scale{1.0f, 2.0f};
  EXPECT_THROW(sc::Int8Factor(q.data(), 2, 2, 2, 1, scale.data()), std::invalid_argument);
  q[1] = 0;
  scale[1] = -1.0f;
  EXPECT_THROW(sc::Int8Factor(q.data(), 2, 2, 2, 1, scale.data()), std::invalid_argument);
  scale[1] = 1.0f;
  const sc::Int8Factor f(q.data(), 2, 2, 2, 1, scale.data());
  std::vector<float> x(6), y(6);
  EXPECT_THROW(sc::int8_sketched_matmul(sc::TensorView(x.data(), sc::DType::float32, {2, 3}), f, f,
                                        sc::TensorView(y.data(), sc::DType::float32, {2, 2})),
               sc::shape_error);
  std::vector<double> xd(4);
  EXPECT_THROW(sc::int8_sketched_matmul(sc::TensorView(xd.data(), sc::DType::float64, {2, 2}), f, f,
                                        sc::TensorView(y.data(), sc::DType::float32, {2, 2})),
               sc::dtype_error);
  // Host memory labelled as CUDA memory: a CPU-only build refuses the device; a CUDA build refuses
  // the closed gated path before anything touches a device.
  const sc::Device gpu{sc::DeviceType::cuda, 0};
  const auto on_gpu = [&] {
    sc::int8_sketched_matmul(sc::TensorView(x.data(), sc::DType::float32, {2, 2}, {}, gpu), f, f,
                             sc::TensorView(y.data(), sc::DType::float32, {2, 2}, {}, gpu));
  };
  if (sc::build_info().cuda) {
    const sc::ScopedGatedPath closed(sc::GatedPath::cuda_int8_factors, false);
    try {
      on_gpu();
      FAIL() << "the closed gate let the call through";
    } catch (const sc::unverified_path_error& e) {
      EXPECT_NE(std::string(e.what()).find("int8_sketched_matmul on a CUDA device: this runs the gated path "
                                           "'cuda_int8_factors'"),
                std::string::npos);
      EXPECT_NE(std::string(e.what()).find("SKETCHCORE_CUDA_UNVERIFIED=1"), std::string::npos);
    }
    if (sc::cuda_device_count() == 0) {  // open, without a device: the CUDA runtime's error, never a crash
      const sc::ScopedGatedPath open(sc::GatedPath::cuda_int8_factors, true);
      EXPECT_THROW(on_gpu(), sc::cuda_error);
    }
  } else {
    EXPECT_THROW(on_gpu(), sc::device_error);
  }
  sc::Epilogue dropout;
  dropout.dropout_p = 0.5;
  try {
    sc::int8_sketched_matmul(sc::TensorView(x.data(), sc::DType::float32, {2, 2}), f, f,
                             sc::TensorView(y.data(), sc::DType::float32, {2, 2}), dropout);
    FAIL() << "dropout was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("int8_sketched_matmul: dropout_p: expected 0"), std::string::npos);
  }
  EXPECT_THROW(sc::set_int8_gemm_isa("sse9"), std::invalid_argument);
}

/// The full-rank product in float64 from x's rows quantized as documented (float32 steps):
/// act(scale · s_x · Σ_k a[k] W_q[k][j] · W.scale[j] + bias[j]).
std::vector<double> dense_reference(const std::vector<float>& x, std::int64_t rows, const Factor& W,
                                    const std::vector<float>* bias, double scale, sc::Activation act) {
  const Quantized a = quantize_rows(x, rows, W.rows);
  std::vector<double> y(static_cast<std::size_t>(rows * W.cols));
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < W.cols; ++j) {
      double sum = 0;
      for (std::int64_t k = 0; k < W.rows; ++k) sum += static_cast<double>(a.q[i * W.rows + k]) * W.q[k * W.cols + j];
      double v = scale * sum * static_cast<double>(a.scale[i]) * static_cast<double>(W.scale[j]);
      if (bias) v += (*bias)[static_cast<std::size_t>(j)];
      y[static_cast<std::size_t>(i * W.cols + j)] = sketchcore_test::activate(v, act);
    }
  }
  return y;
}

TEST(Int8DenseMatmul, EveryKernelFamilyMatchesTheFloat64Reference) {
  std::mt19937 gen(17);
  std::normal_distribution<float> normal;
  const std::string before = sc::int8_gemm_isa();
  for (const char* isa : {"amx", "avx512_vnni", "avx_vnni", "avx2", "portable"}) {
    if (!sc::int8_gemm_isa_supported(isa)) continue;
    sc::set_int8_gemm_isa(isa);
    for (std::int64_t rows : {0, 1, 5, 6, 7, 17, 50}) {
      for (auto [d_in, d_out] : {std::array<std::int64_t, 2>{1, 1}, {70, 130}, {64, 64}, {9, 200}, {130, 3}}) {
        for (const sc::Activation act : {sc::Activation::none, sc::Activation::gelu}) {
          const Factor W = random_factor(d_in, d_out, gen);
          // x's rows 3 elements apart beyond d_in (a non-contiguous row stride), out's rows 2 apart.
          const std::int64_t x_ld = d_in + 3, out_ld = d_out + 2;
          std::vector<float> storage(static_cast<std::size_t>(std::max<std::int64_t>(rows * x_ld, 1)));
          for (auto& v : storage) v = normal(gen);
          std::vector<float> x(static_cast<std::size_t>(rows * d_in)), bias(static_cast<std::size_t>(d_out));
          for (std::int64_t i = 0; i < rows; ++i) {
            for (std::int64_t k = 0; k < d_in; ++k) x[i * d_in + k] = storage[i * x_ld + k];
          }
          for (auto& v : bias) v = normal(gen);
          std::vector<float> y(static_cast<std::size_t>(std::max<std::int64_t>(rows * out_ld, 1)), std::nanf(""));
          sc::Epilogue e;
          e.activation = act;
          e.scale = 0.75;
          e.bias = sc::TensorView(bias.data(), sc::DType::float32, {d_out});
          const sc::Int8Factor w = pack(W);
          sc::int8_matmul(sc::TensorView(storage.data(), sc::DType::float32, {rows, d_in}, {x_ld, 1}), w,
                          sc::TensorView(y.data(), sc::DType::float32, {rows, d_out}, {out_ld, 1}), e);
          const std::vector<double> ref = dense_reference(x, rows, W, &bias, 0.75, act);
          for (std::int64_t i = 0; i < rows; ++i) {
            for (std::int64_t j = 0; j < d_out; ++j) {
              const double r = ref[static_cast<std::size_t>(i * d_out + j)];
              ASSERT_NEAR(y[static_cast<std::size_t>(i * out_ld + j)], r, 2e-5 * (1.0 + std::fabs(r)))
                  << isa << " rows " << rows << " d_in " << d_in << " d_out " << d_out;
            }
            for (std::int64_t j = d_out; j < out_ld && rows > 0; ++j) {
              ASSERT_TRUE(std::isnan(y[static_cast<std::size_t>(i * out_ld + j)])) << "wrote past a row";
            }
          }
        }
      }
    }
  }
  sc::set_int8_gemm_isa(before);
}

TEST(Int8DenseMatmul, LeadingDimensionsAndTheShapeQuery) {
  std::mt19937 gen(5);
  std::normal_distribution<float> normal;
  const Factor W = random_factor(33, 65, gen);
  const sc::Int8Factor w = pack(W);
  // x (2, 3, 33) with its leading dimensions permuted: they do not collapse into one row stride.
  std::vector<float> storage(3 * 2 * 33);
  for (auto& v : storage) v = normal(gen);
  const sc::TensorView x(storage.data(), sc::DType::float32, {2, 3, 33}, {33, 2 * 33, 1});
  EXPECT_EQ(sc::int8_matmul_output_shape(x, w), (std::vector<std::int64_t>{2, 3, 65}));
  std::vector<float> rows_of_x(6 * 33);
  for (std::int64_t a = 0; a < 2; ++a) {
    for (std::int64_t b = 0; b < 3; ++b) {
      for (std::int64_t k = 0; k < 33; ++k) rows_of_x[(a * 3 + b) * 33 + k] = storage[a * 33 + b * 66 + k];
    }
  }
  std::vector<float> y(6 * 65);
  sc::int8_matmul(x, w, sc::TensorView(y.data(), sc::DType::float32, {2, 3, 65}));
  const std::vector<double> ref = dense_reference(rows_of_x, 6, W, nullptr, 1.0, sc::Activation::none);
  for (std::size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], ref[i], 2e-5 * (1.0 + std::fabs(ref[i]))) << i;
  // An all-zero row gives zeros (plus the bias); a row with a NaN gives a NaN row.
  std::vector<float> special(2 * 33, 0.0f), out(2 * 65);
  special[33 + 4] = std::nanf("");
  sc::int8_matmul(sc::TensorView(special.data(), sc::DType::float32, {2, 33}), w,
                  sc::TensorView(out.data(), sc::DType::float32, {2, 65}));
  for (std::int64_t j = 0; j < 65; ++j) {
    EXPECT_EQ(out[static_cast<std::size_t>(j)], 0.0f);
    EXPECT_TRUE(std::isnan(out[static_cast<std::size_t>(65 + j)]));
  }
}

/// Runs `call`, which must throw E with a message containing `expected`.
template <class E, class F>
void expect_error(F call, const std::string& expected) {
  try {
    call();
    FAIL() << "accepted; expected: " << expected;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

TEST(Int8DenseMatmul, ErrorsNameTheArgument) {
  std::vector<std::int8_t> q(6, 1);
  const std::vector<float> scale{1.0f, 2.0f, 3.0f};
  const sc::Int8Factor w(q.data(), 2, 3, 3, 1, scale.data());  // d_in 2, d_out 3
  std::vector<float> x(8), y(12), bias(4);
  const sc::TensorView x22(x.data(), sc::DType::float32, {2, 2}), y23(y.data(), sc::DType::float32, {2, 3});
  expect_error<sc::shape_error>([&] { sc::int8_matmul(sc::TensorView(x.data(), sc::DType::float32, {2, 3}), w, y23); },
                                "int8_matmul: W: expected d_in = 3 rows (x.shape[-1]), got shape (2, 3)");
  std::vector<double> xd(4);
  expect_error<sc::dtype_error>([&] { sc::int8_matmul(sc::TensorView(xd.data(), sc::DType::float64, {2, 2}), w, y23); },
                                "int8_matmul: x: expected dtype float32, got float64");
  expect_error<sc::shape_error>([&] { sc::int8_matmul(x22, w, sc::TensorView(y.data(), sc::DType::float32, {2, 4})); },
                                "int8_matmul: out: expected shape (2, 3)");
  expect_error<sc::dtype_error>([&] { sc::int8_matmul(x22, w, sc::TensorView(xd.data(), sc::DType::float64, {2, 3})); },
                                "int8_matmul: out: expected dtype float32");
  sc::Epilogue wrong_bias;
  wrong_bias.bias = sc::TensorView(bias.data(), sc::DType::float32, {4});
  expect_error<sc::shape_error>([&] { sc::int8_matmul(x22, w, y23, wrong_bias); },
                                "int8_matmul: bias: expected shape (3,), got shape (4,)");
  sc::Epilogue inner;
  inner.inner_activation = sc::Activation::relu;
  expect_error<std::invalid_argument>([&] { sc::int8_matmul(x22, w, y23, inner); },
                                      "int8_matmul: inner_activation: expected none (a full-rank int8 product has "
                                      "no inner product to apply it to), got 'relu'");
  sc::Epilogue dropout;
  dropout.dropout_p = 0.1;
  expect_error<std::invalid_argument>([&] { sc::int8_matmul(x22, w, y23, dropout); }, "int8_matmul: dropout_p: expected 0");
  sc::Epilogue infinite;
  infinite.scale = INFINITY;
  expect_error<std::invalid_argument>([&] { sc::int8_matmul(x22, w, y23, infinite); },
                                      "int8_matmul: scale: expected a finite number");
  expect_error<sc::shape_error>([&] { sc::int8_matmul(x22, w, sc::TensorView(x.data(), sc::DType::float32, {2, 3})); },
                                "int8_matmul: out: expected no overlap with x or bias");
  expect_error<sc::shape_error>([&] { sc::int8_matmul(x22, w, sc::TensorView(y.data(), sc::DType::float32, {2, 3}, {1, 2})); },
                                "int8_matmul: out: expected unit column stride");
  sc::Int8Factor source(q.data(), 2, 3, 3, 1, scale.data());
  const sc::Int8Factor taken(std::move(source));
  expect_error<std::invalid_argument>([&] { sc::int8_matmul(x22, source, y23); },  // NOLINT(bugprone-use-after-move)
                                      "int8_matmul: W: expected a factor holding values, got a moved-from Int8Factor");
  const sc::Device gpu{sc::DeviceType::cuda, 0};
  const auto on_gpu = [&] {
    sc::int8_matmul(sc::TensorView(x.data(), sc::DType::float32, {2, 2}, {}, gpu), w,
                    sc::TensorView(y.data(), sc::DType::float32, {2, 3}, {}, gpu));
  };
  if (sc::build_info().cuda) {
    const sc::ScopedGatedPath closed(sc::GatedPath::cuda_int8_factors, false);
    expect_error<sc::unverified_path_error>(on_gpu, "int8_matmul on a CUDA device: this runs the gated path "
                                                    "'cuda_int8_factors'");
  } else {
    expect_error<sc::device_error>(on_gpu, "int8_matmul: x: expected an array in CPU memory");
  }
}

}  // namespace
