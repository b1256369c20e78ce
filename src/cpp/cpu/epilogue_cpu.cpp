#include <cmath>

#include "detail/epilogue_cpu.hpp"
#include "detail/parallel.hpp"

namespace sketchcore::detail {

namespace {

// One function object per activation, so the inner loop holds no branch on the kind.
struct Identity {
  template <class T> T operator()(T z) const { return z; }
};
struct Relu {
  // `z < 0 ? 0 : z` (not max) so that NaN propagates like np.maximum.
  template <class T> T operator()(T z) const { return z < T(0) ? T(0) : z; }
};
// Both GELU forms avoid `1 + erf(·)` / `1 + tanh(·)`, which cancel catastrophically for
// negative z: ½·z·(1 + erf(z/√2)) = ½·z·erfc(−z/√2) and ½·(1 + tanh(u)) = σ(2u).
struct GeluErf {
  template <class T> T operator()(T z) const { return T(0.5) * z * std::erfc(z * T(-0.70710678118654752440)); }
};
struct GeluTanh {
  template <class T> T operator()(T z) const {
    const T u = T(0.79788456080286535588) * (z + T(0.044715) * z * z * z);
    return z / (T(1) + std::exp(T(-2) * u));
  }
};
struct Silu {
  template <class T> T operator()(T z) const { return z / (T(1) + std::exp(-z)); }
};

template <class T, class Act>
void epilogue_rows(T* y, std::int64_t rows, std::int64_t cols, std::int64_t ld, const T* bias,
                   std::int64_t bias_stride, Act act) {
  // Below ~64k elements a second thread costs more than it saves.
  const std::int64_t grain = std::max<std::int64_t>(1, (std::int64_t{1} << 16) / std::max<std::int64_t>(cols, 1));
  parallel_for(rows, grain, [=](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      T* row = y + r * ld;
      if (bias) {
        for (std::int64_t j = 0; j < cols; ++j) row[j] = act(row[j] + bias[j * bias_stride]);
      } else {
        for (std::int64_t j = 0; j < cols; ++j) row[j] = act(row[j]);
      }
    }
  });
}

}  // namespace

template <class T>
void apply_epilogue(T* y, std::int64_t rows, std::int64_t cols, std::int64_t ld, const T* bias,
                    std::int64_t bias_stride, Activation activation) {
  switch (activation) {
    case Activation::none:
      if (bias) epilogue_rows(y, rows, cols, ld, bias, bias_stride, Identity{});
      return;
    case Activation::relu: return epilogue_rows(y, rows, cols, ld, bias, bias_stride, Relu{});
    case Activation::gelu: return epilogue_rows(y, rows, cols, ld, bias, bias_stride, GeluErf{});
    case Activation::gelu_tanh: return epilogue_rows(y, rows, cols, ld, bias, bias_stride, GeluTanh{});
    case Activation::silu: return epilogue_rows(y, rows, cols, ld, bias, bias_stride, Silu{});
  }
}

template void apply_epilogue<float>(float*, std::int64_t, std::int64_t, std::int64_t, const float*, std::int64_t,
                                    Activation);
template void apply_epilogue<double>(double*, std::int64_t, std::int64_t, std::int64_t, const double*,
                                     std::int64_t, Activation);

}  // namespace sketchcore::detail
