// Runs one sketched layer y = relu(0.5 · (x·S)·U + b) through the installed library and
// checks it against a plain triple loop. Prints "max abs error: <e>", the FNV-1a hash of the
// output's bytes (examples/c/sketched_layer.c computes the same layer through the C ABI and must
// print the same hash) and "OK" on success.
#include <sketchcore/sketchcore.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <vector>

int main() {
  const std::int64_t batch = 8, d_in = 32, k = 4, terms = 2, d_out = 16;
  // Uniform in [-1, 1) from a 64-bit LCG: the C example draws the same inputs in the same order.
  std::uint64_t state = 42;
  auto randn = [&](std::size_t n) {
    std::vector<float> v(n);
    for (auto& e : v) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      e = static_cast<float>(static_cast<double>(state >> 40) / 8388608.0 - 1.0);
    }
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
    sketchcore::set_num_threads(2);  // as the C example
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
  std::uint64_t hash = 14695981039346656037ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(y.data());
  for (std::size_t i = 0; i < y.size() * sizeof(float); ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
  std::printf("output fnv1a: %016llx\n", static_cast<unsigned long long>(hash));
  std::printf("max abs error: %.3g\n", max_error);
  const bool ok = max_error < 1e-3;
  std::printf("%s\n", ok ? "OK" : "MISMATCH");
  return ok ? 0 : 1;
}
