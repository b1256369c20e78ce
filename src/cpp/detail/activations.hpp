// The activations and their derivatives, one function object each, and the one table that
// maps an Activation to them (visit_activation), shared by the CPU epilogue and (compiled by
// nvcc) the CUDA kernels, so both backends evaluate the same formulas. Also the epilogue's
// arguments as both backends' kernels take them (EpilogueArgs). Both GELU forms avoid `1 + erf(·)` / `1 + tanh(·)`, which cancel
// catastrophically for negative z: ½·z·(1 + erf(z/√2)) = ½·z·erfc(−z/√2) and
// ½·(1 + tanh(u)) = σ(2u).
#pragma once

#include <cmath>
#include <cstdint>

#include "detail/philox.hpp"  // SKETCHCORE_HOST_DEVICE
#include "sketchcore/epilogue.hpp"

namespace sketchcore::detail {

template <class T>
SKETCHCORE_HOST_DEVICE T math_exp(T x) {
#if defined(__CUDA_ARCH__)
  return ::exp(x);  // CUDA's float and double overloads
#else
  return std::exp(x);
#endif
}

template <class T>
SKETCHCORE_HOST_DEVICE T math_erfc(T x) {
#if defined(__CUDA_ARCH__)
  return ::erfc(x);
#else
  return std::erfc(x);
#endif
}

struct Identity {
  template <class T> SKETCHCORE_HOST_DEVICE T operator()(T z) const { return z; }
};
struct Relu {
  // `z < 0 ? 0 : z` (not max) so that NaN propagates like np.maximum.
  template <class T> SKETCHCORE_HOST_DEVICE T operator()(T z) const { return z < T(0) ? T(0) : z; }
};
struct GeluErf {
  template <class T> SKETCHCORE_HOST_DEVICE T operator()(T z) const {
    return T(0.5) * z * math_erfc(z * T(-0.70710678118654752440));
  }
};
struct GeluTanh {
  template <class T> SKETCHCORE_HOST_DEVICE T operator()(T z) const {
    const T u = T(0.79788456080286535588) * (z + T(0.044715) * z * z * z);
    return z / (T(1) + math_exp(T(-2) * u));
  }
};
struct Silu {
  template <class T> SKETCHCORE_HOST_DEVICE T operator()(T z) const { return z / (T(1) + math_exp(-z)); }
};

// Derivatives, written against the same stable forms as the forward.
struct ReluGrad {
  template <class T> SKETCHCORE_HOST_DEVICE T operator()(T h) const { return h > T(0) ? T(1) : T(0); }  // relu'(0) = 0
};
struct GeluErfGrad {  // Φ(h) + h·φ(h)
  template <class T> SKETCHCORE_HOST_DEVICE T operator()(T h) const {
    return T(0.5) * math_erfc(h * T(-0.70710678118654752440)) +
           h * T(0.39894228040143267794) * math_exp(T(-0.5) * h * h);
  }
};
struct GeluTanhGrad {  // d/dh [h·σ(2u)], u = c(h + a h³)
  template <class T> SKETCHCORE_HOST_DEVICE T operator()(T h) const {
    const T c = T(0.79788456080286535588), a = T(0.044715);
    const T s = T(1) / (T(1) + math_exp(T(-2) * c * (h + a * h * h * h)));
    return s + h * s * (T(1) - s) * T(2) * c * (T(1) + T(3) * a * h * h);
  }
};
struct SiluGrad {  // σ(h)·(1 + h·(1 − σ(h)))
  template <class T> SKETCHCORE_HOST_DEVICE T operator()(T h) const {
    const T s = T(1) / (T(1) + math_exp(-h));
    return s * (T(1) + h * (T(1) - s));
  }
};

struct One {  // identity' (never evaluated: the backends skip H for Activation::none)
  template <class T> SKETCHCORE_HOST_DEVICE T operator()(T) const { return T(1); }
};

/// The one table of activations: calls `fn(forward, derivative)` with the function objects
/// of `activation`. Adding an activation: its enumerator and doc (sketchcore/epilogue.hpp),
/// its name (epilogue.cpp), its two functors and a case here; both backends and the bindings
/// follow (src/README.md).
template <class Fn>
void visit_activation(Activation activation, Fn&& fn) {
  switch (activation) {
    case Activation::none: fn(Identity{}, One{}); return;
    case Activation::relu: fn(Relu{}, ReluGrad{}); return;
    case Activation::gelu: fn(GeluErf{}, GeluErfGrad{}); return;
    case Activation::gelu_tanh: fn(GeluTanh{}, GeluTanhGrad{}); return;
    case Activation::silu: fn(Silu{}, SiluGrad{}); return;
  }
}

/// Philox word threshold and keep scale of inverted dropout with probability p: an element
/// is dropped when its word < threshold (= round(p · 2^32)); p ≥ 1 − 2^-33 drops all.
struct DropoutPlan {
  bool enabled = false;       ///< p > 0
  bool drop_all = false;      ///< p rounds to 2^32: every element is dropped
  std::uint64_t seed = 0;
  std::uint32_t threshold = 0;  ///< dropped ⇔ Philox word < threshold
  double keep_scale = 1.0;      ///< 1 / (1 − p)
};

/// The dropout plan of probability `p` (0 = disabled) and `seed`.
inline DropoutPlan make_dropout_plan(double p, std::uint64_t seed) {
  DropoutPlan d;
  if (p > 0.0) {
    d.enabled = true;
    d.seed = seed;
    const double threshold = std::nearbyint(p * 4294967296.0);
    d.drop_all = threshold >= 4294967296.0;
    d.threshold = d.drop_all ? 0xFFFFFFFFu : static_cast<std::uint32_t>(threshold);
    d.keep_scale = d.drop_all ? 0.0 : 1.0 / (1.0 - p);
  }
  return d;
}

/// The mask words of output elements (row, 4·group … 4·group + 3) under plan `d`: element
/// (row, col) is word col % 4 of block (row, col / 4), so one Philox block serves 4 columns.
/// All zero (never read) when nothing is dropped at random.
SKETCHCORE_HOST_DEVICE Philox4x32 dropout_words(const DropoutPlan& d, std::uint64_t row, std::uint64_t group) {
  if (!d.enabled || d.drop_all) return {};
  return dropout_block(d.seed, row, group);
}

/// Whether dropout (enabled) keeps the element whose mask word is `word`.
SKETCHCORE_HOST_DEVICE bool dropout_keeps(const DropoutPlan& d, std::uint32_t word) {
  return !d.drop_all && word >= d.threshold;
}

/// The epilogue as the kernels take it, resolved once per call for element type T: what is
/// left to apply (the CUDA backend clears what cuBLASLt fused into its GEMM).
template <class T>
struct EpilogueArgs {
  const T* bias = nullptr;  ///< null: no bias to add
  std::int64_t bias_stride = 0;
  Activation activation = Activation::none;
  DropoutPlan dropout;

  /// False when the epilogue would leave every element as it is.
  SKETCHCORE_HOST_DEVICE bool active() const noexcept {
    return bias || activation != Activation::none || dropout.enabled;
  }
};

/// Resolves `epilogue` for element type T.
template <class T>
EpilogueArgs<T> resolve_epilogue(const Epilogue& epilogue) {
  EpilogueArgs<T> args;
  if (epilogue.bias) {
    args.bias = static_cast<const T*>(epilogue.bias->data());
    args.bias_stride = epilogue.bias->stride(0);
  }
  args.activation = epilogue.activation;
  args.dropout = make_dropout_plan(epilogue.dropout_p, epilogue.seed);
  return args;
}

}  // namespace sketchcore::detail
