// Vectorised float32 epilogue kernels (declared in cpu/epilogue_kernels.hpp).
//
// Each kernel is a plain loop over contiguous elements whose body is branch-free
// (cpu/vector_math.hpp), so GCC and Clang vectorise it. SKETCHCORE_CLONES compiles it
// for AVX-512, AVX2 and baseline x86-64 and picks one at load time (function
// multiversioning through an ifunc): the library still runs on any x86-64 and still
// builds elsewhere (one plain version). Measured against a STREAM-like copy of the same
// bytes in bench/test_bench_epilogue.py.
#include "cpu/epilogue_kernels.hpp"

#include "cpu/activation_isa.hpp"
#include "cpu/target_clones.hpp"
#include "cpu/vector_math.hpp"
#include "detail/philox.hpp"

namespace sketchcore::detail {

namespace {

// The activations and their derivatives on a double (the float32 argument widened).
struct GeluErfF {
  static double forward(double z) {
    double cdf, pdf;
    vmath::normal_cdf_pdf(z, cdf, pdf);
    return z * cdf;
  }
  static double derivative(double h) {  // Φ(h) + h·φ(h)
    double cdf, pdf;
    vmath::normal_cdf_pdf(h, cdf, pdf);
    return cdf + h * pdf;
  }
};
// The relu forward stays in float32 (it rounds nothing).
SKETCHCORE_CLONES void relu_forward(float* __restrict y, const float* __restrict bias, std::int64_t n) {
  if (bias) {
    for (std::int64_t j = 0; j < n; ++j) {
      const float z = y[j] + bias[j];
      y[j] = z < 0.0f ? 0.0f : z;
    }
  } else {
    for (std::int64_t j = 0; j < n; ++j) y[j] = y[j] < 0.0f ? 0.0f : y[j];
  }
}

SKETCHCORE_CLONES void bias_only(float* __restrict y, const float* __restrict bias, std::int64_t n) {
  for (std::int64_t j = 0; j < n; ++j) y[j] += bias[j];
}

// An element function as the loops below take it: forward(z) and backward(dy, z) = dy·act′(z)
// in float32 terms. Two kinds: the double formulas above (the argument widened, the result
// and dy·act′ rounded once) and the float32 functions of cpu/vector_math.hpp.
template <class F>
struct InDouble {
  static float forward(float z) { return static_cast<float>(F::forward(static_cast<double>(z))); }
  static float backward(float dy, float z) {
    return static_cast<float>(static_cast<double>(dy) * F::derivative(static_cast<double>(z)));
  }
};
template <float (*kForward)(float), float (*kDerivative)(float)>
struct InFloat {
  static float forward(float z) { return kForward(z); }
  static float backward(float dy, float z) { return dy * kDerivative(z); }
};
using GeluErf = InDouble<GeluErfF>;
using GeluTanh = InFloat<vmath::gelu_tanh, vmath::gelu_tanh_derivative>;
using Silu = InFloat<vmath::silu, vmath::silu_derivative>;

// The sum z = y + bias is rounded to float32 first, as the scalar formulas do. Always inlined:
// each cloned caller below must compile the loop for its own instruction set (GCC once kept
// GELU-tanh's backward loop out of line, compiled for baseline x86-64 in every clone: 5.9 ns per
// element instead of 1.3).
template <class Op>
__attribute__((always_inline)) inline void forward_loop(float* __restrict y, const float* __restrict bias, std::int64_t n) {
  if (bias) {
    for (std::int64_t j = 0; j < n; ++j) y[j] = Op::forward(y[j] + bias[j]);
  } else {
    for (std::int64_t j = 0; j < n; ++j) y[j] = Op::forward(y[j]);
  }
}

template <class Op>
__attribute__((always_inline)) inline void backward_loop(const float* __restrict dy, float* __restrict g, const float* __restrict bias,
                          std::int64_t n) {
  if (bias) {
    for (std::int64_t j = 0; j < n; ++j) g[j] = Op::backward(dy[j], g[j] + bias[j]);
  } else {
    for (std::int64_t j = 0; j < n; ++j) g[j] = Op::backward(dy[j], g[j]);
  }
}

SKETCHCORE_CLONES void gelu_forward_portable(float* y, const float* bias, std::int64_t n) {
  forward_loop<GeluErf>(y, bias, n);
}
SKETCHCORE_CLONES void gelu_tanh_forward_portable(float* y, const float* bias, std::int64_t n) {
  forward_loop<GeluTanh>(y, bias, n);
}
// SiLU's argument is exact, so it is computed in float32 throughout (twice the lanes).
SKETCHCORE_CLONES void silu_forward_portable(float* y, const float* bias, std::int64_t n) {
  forward_loop<Silu>(y, bias, n);
}

SKETCHCORE_CLONES void relu_backward(const float* __restrict dy, float* __restrict g, const float* __restrict bias,
                                     std::int64_t n) {
  if (bias) {
    for (std::int64_t j = 0; j < n; ++j) g[j] = g[j] + bias[j] > 0.0f ? dy[j] : dy[j] * 0.0f;
  } else {
    for (std::int64_t j = 0; j < n; ++j) g[j] = g[j] > 0.0f ? dy[j] : dy[j] * 0.0f;
  }
}
SKETCHCORE_CLONES void gelu_backward_portable(const float* dy, float* g, const float* bias, std::int64_t n) {
  backward_loop<GeluErf>(dy, g, bias, n);
}
SKETCHCORE_CLONES void gelu_tanh_backward_portable(const float* dy, float* g, const float* bias, std::int64_t n) {
  backward_loop<GeluTanh>(dy, g, bias, n);
}
SKETCHCORE_CLONES void silu_backward_portable(const float* dy, float* g, const float* bias, std::int64_t n) {
  backward_loop<Silu>(dy, g, bias, n);
}

/// The family activation_isa() picked (cpu/activation_isa.hpp), looked up once.
const ActivationKernels& chosen_kernels() noexcept {
  static const ActivationKernels& chosen = activation_kernels(activation_isa());
  return chosen;
}

}  // namespace

const ActivationKernels kPortableActivationKernels = {
    gelu_forward_portable, gelu_backward_portable, gelu_tanh_forward_portable,
    gelu_tanh_backward_portable, silu_forward_portable, silu_backward_portable,
};

void activation_forward_f32(Activation act, float* y, const float* bias, std::int64_t n) noexcept {
  switch (act) {
    case Activation::none:
      if (bias) bias_only(y, bias, n);
      return;
    case Activation::relu: relu_forward(y, bias, n); return;
    case Activation::gelu:
    case Activation::gelu_tanh:
    case Activation::silu: chosen_kernels().forward(act)(y, bias, n); return;
  }
}

void activation_backward_f32(Activation act, const float* dy, float* g, const float* bias, std::int64_t n) noexcept {
  switch (act) {
    case Activation::none:
      for (std::int64_t j = 0; j < n; ++j) g[j] = dy[j];
      return;
    case Activation::relu: relu_backward(dy, g, bias, n); return;
    case Activation::gelu:
    case Activation::gelu_tanh:
    case Activation::silu: chosen_kernels().backward(act)(dy, g, bias, n); return;
  }
}

// Philox4x32-10 on `groups` consecutive counters at once, lanes in separate arrays so the
// rounds vectorise (the 32×32→64-bit products map to vpmuludq); the same bits as
// detail::dropout_block, word for word (tests/cpp/test_philox.cpp checks that).
SKETCHCORE_CLONES void dropout_words_impl(std::uint32_t* __restrict words, std::uint64_t seed, std::uint64_t row,
                                          std::uint64_t group0, std::int64_t groups) {
  const auto row_lo = static_cast<std::uint32_t>(row), row_hi = static_cast<std::uint32_t>(row >> 32);
  const auto seed_lo = static_cast<std::uint32_t>(seed), seed_hi = static_cast<std::uint32_t>(seed >> 32);
  for (std::int64_t i = 0; i < groups; ++i) {
    std::uint32_t c0 = static_cast<std::uint32_t>(group0 + static_cast<std::uint64_t>(i)), c1 = row_lo, c2 = row_hi,
                  c3 = kDropoutStream;
    std::uint32_t k0 = seed_lo, k1 = seed_hi;
    for (int round = 0; round < 10; ++round) {
      const std::uint64_t p0 = std::uint64_t{0xD2511F53u} * c0, p1 = std::uint64_t{0xCD9E8D57u} * c2;
      const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
      const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
      c0 = hi1 ^ c1 ^ k0;
      c1 = lo1;
      c2 = hi0 ^ c3 ^ k1;
      c3 = lo0;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    words[4 * i] = c0;
    words[4 * i + 1] = c1;
    words[4 * i + 2] = c2;
    words[4 * i + 3] = c3;
  }
}

void dropout_words(std::uint32_t* words, std::uint64_t seed, std::uint64_t row, std::uint64_t group0,
                   std::int64_t groups) noexcept {
  dropout_words_impl(words, seed, row, group0, groups);
}

namespace {
SKETCHCORE_CLONES void apply_f32(float* __restrict y, const std::uint32_t* __restrict words, std::uint32_t threshold,
                                 float keep_scale, std::int64_t n) {
  for (std::int64_t j = 0; j < n; ++j) y[j] = words[j] >= threshold ? y[j] * keep_scale : 0.0f;
}
SKETCHCORE_CLONES void apply_f64(double* __restrict y, const std::uint32_t* __restrict words, std::uint32_t threshold,
                                 double keep_scale, std::int64_t n) {
  for (std::int64_t j = 0; j < n; ++j) y[j] = words[j] >= threshold ? y[j] * keep_scale : 0.0;
}
}  // namespace

void dropout_apply_f32(float* y, const std::uint32_t* words, std::uint32_t threshold, float keep_scale,
                       std::int64_t n) noexcept {
  apply_f32(y, words, threshold, keep_scale, n);
}
void dropout_apply_f64(double* y, const std::uint32_t* words, std::uint32_t threshold, double keep_scale,
                       std::int64_t n) noexcept {
  apply_f64(y, words, threshold, keep_scale, n);
}

}  // namespace sketchcore::detail
