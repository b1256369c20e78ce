// Test helpers: random data and a float64 triple-loop reference of the sketched GEMM.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "sketchcore/sketchcore.hpp"

namespace sketchcore_test {

inline std::vector<double> random_vector(std::size_t n, std::mt19937_64& gen) {
  std::normal_distribution<double> normal;
  std::vector<double> v(n);
  for (auto& e : v) e = normal(gen);
  return v;
}

template <class T>
std::vector<T> cast(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

inline double activate(double z, sketchcore::Activation a) {
  using sketchcore::Activation;
  switch (a) {
    case Activation::none: return z;
    case Activation::relu: return z < 0 ? 0 : z;
    case Activation::gelu: return 0.5 * z * std::erfc(-z / std::sqrt(2.0));
    case Activation::gelu_tanh:
      return z / (1 + std::exp(-2 * std::sqrt(2.0 / M_PI) * (z + 0.044715 * z * z * z)));
    case Activation::silu: return z / (1 + std::exp(-z));
  }
  return z;
}

/// y[i, o] = act(scale · Σ_t Σ_j (Σ_c x[i, c] S[t, c, j]) U[t, j, o] + bias[o]), all compact.
inline std::vector<double> reference(const std::vector<double>& x, const std::vector<double>& S,
                                     const std::vector<double>& U, const std::vector<double>* bias,
                                     std::int64_t rows, std::int64_t d_in, std::int64_t terms, std::int64_t k,
                                     std::int64_t d_out, double scale, sketchcore::Activation act) {
  std::vector<double> y(static_cast<std::size_t>(rows * d_out));
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t o = 0; o < d_out; ++o) {
      double acc = 0;
      for (std::int64_t t = 0; t < terms; ++t) {
        for (std::int64_t j = 0; j < k; ++j) {
          double xs = 0;
          for (std::int64_t c = 0; c < d_in; ++c) xs += x[i * d_in + c] * S[(t * d_in + c) * k + j];
          acc += xs * U[(t * k + j) * d_out + o];
        }
      }
      y[i * d_out + o] = activate(scale * acc + (bias ? (*bias)[o] : 0.0), act);
    }
  }
  return y;
}

template <class T>
double relative_error(const std::vector<T>& y, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    num += (double(y[i]) - ref[i]) * (double(y[i]) - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

}  // namespace sketchcore_test
