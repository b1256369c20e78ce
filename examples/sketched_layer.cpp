// Runs one sketched layer y = relu(0.5 · (x·S)·U + b) through the installed library and
// checks it against a plain triple loop. Prints "max abs error: <e>" and "OK" on success.
#include <sketchcore/sketchcore.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <random>
#include <vector>

int main() {
  const std::int64_t batch = 8, d_in = 32, k = 4, terms = 2, d_out = 16;
  std::mt19937 gen(42);
  std::normal_distribution<float> normal;
  auto randn = [&](std::size_t n) {
    std::vector<float> v(n);
    for (auto& e : v) e = normal(gen);
    return v;
  };
  std::vector<float> x = randn(batch * d_in), S = randn(terms * d_in * k), U = randn(terms * k * d_out),
                     bias = randn(d_out), y(batch * d_out);

  using sketchcore::DType;
  using sketchcore::TensorView;
  sketchcore::Epilogue epilogue;
  epilogue.scale = 0.5;
  epilogue.activation = sketchcore::parse_activation("relu");
  epilogue.bias = TensorView(bias.data(), DType::float32, {d_out});
  try {
    sketchcore::sketched_matmul(TensorView(x.data(), DType::float32, {batch, d_in}),
                                TensorView(S.data(), DType::float32, {terms, d_in, k}),
                                TensorView(U.data(), DType::float32, {terms, k, d_out}),
                                TensorView(y.data(), DType::float32, {batch, d_out}), epilogue);
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }

  double max_error = 0.0;
  for (std::int64_t i = 0; i < batch; ++i) {
    for (std::int64_t o = 0; o < d_out; ++o) {
      double acc = 0.0;
      for (std::int64_t t = 0; t < terms; ++t) {
        for (std::int64_t j = 0; j < k; ++j) {
          double xs = 0.0;
          for (std::int64_t c = 0; c < d_in; ++c) xs += double(x[i * d_in + c]) * S[(t * d_in + c) * k + j];
          acc += xs * U[(t * k + j) * d_out + o];
        }
      }
      const double expected = std::max(0.0, 0.5 * acc + bias[o]);
      max_error = std::max(max_error, std::abs(expected - y[i * d_out + o]));
    }
  }
  const auto info = sketchcore::build_info();
  std::printf("sketchcore %s (BLAS %s)\n", info.version.c_str(), info.blas.c_str());
  std::printf("max abs error: %.3g\n", max_error);
  const bool ok = max_error < 1e-3;
  std::printf("%s\n", ok ? "OK" : "MISMATCH");
  return ok ? 0 : 1;
}
