// The CPU epilogue over a row-major block, one row at a time (the row stays in L1 between
// the activation and the dropout): float32 through the vectorised kernels of
// cpu/epilogue_kernels.cpp, float64 through the scalar libm formulas of
// detail/activations.hpp (both with the vectorised Philox mask words).
#include "detail/epilogue_cpu.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cpu/epilogue_kernels.hpp"
#include "detail/activations.hpp"
#include "detail/parallel.hpp"
#include "detail/philox.hpp"
#include "detail/scratch.hpp"

namespace sketchcore::detail {

namespace {

/// Columns whose mask words are drawn at once (16 KiB of words on the stack).
constexpr std::int64_t kMaskColumns = 4096;

/// Applies the dropout of `d` to one row (global index `row`) of `cols` elements.
template <class T>
void dropout_row(T* y, std::int64_t cols, std::uint64_t row, const DropoutPlan& d) {
  if (d.drop_all) {
    std::fill(y, y + cols, T(0));
    return;
  }
  alignas(64) std::uint32_t words[kMaskColumns];
  for (std::int64_t j0 = 0; j0 < cols; j0 += kMaskColumns) {
    const std::int64_t n = std::min(kMaskColumns, cols - j0);
    dropout_words(words, d.seed, row, static_cast<std::uint64_t>(j0 / 4), (n + 3) / 4);
    if constexpr (std::is_same_v<T, float>) {
      dropout_apply_f32(y + j0, words, d.threshold, static_cast<float>(d.keep_scale), n);
    } else {
      dropout_apply_f64(y + j0, words, d.threshold, d.keep_scale, n);
    }
  }
}

/// The bias as a contiguous array: in place when its stride is 1, else gathered once.
template <class T>
const T* contiguous_bias(const EpilogueArgs<T>& a, std::int64_t cols, Scratch<T>& room) {
  if (!a.bias || a.bias_stride == 1) return a.bias;
  T* b = room.allocate(cols);
  for (std::int64_t j = 0; j < cols; ++j) b[j] = a.bias[j * a.bias_stride];
  return b;
}

template <class Act>
void forward_row(double* y, const double* bias, std::int64_t cols, Act act) {
  if (bias) {
    for (std::int64_t j = 0; j < cols; ++j) y[j] = act(y[j] + bias[j]);
  } else {
    for (std::int64_t j = 0; j < cols; ++j) y[j] = act(y[j]);
  }
}

template <class Grad>
void backward_row(const double* dy, double* g, const double* bias, std::int64_t cols, Grad grad) {
  if (bias) {
    for (std::int64_t j = 0; j < cols; ++j) g[j] = dy[j] * grad(g[j] + bias[j]);
  } else {
    for (std::int64_t j = 0; j < cols; ++j) g[j] = dy[j] * grad(g[j]);
  }
}

}  // namespace

template <class T>
void apply_epilogue(T* y, std::int64_t rows, std::int64_t cols, std::int64_t ld, std::int64_t first_row,
                    const EpilogueArgs<T>& a) {
  Scratch<T> room;
  const T* bias = contiguous_bias(a, cols, room);
  const bool transform = bias || a.activation != Activation::none;
  for (std::int64_t r = 0; r < rows; ++r) {
    T* row = y + r * ld;
    if (transform) {
      if constexpr (std::is_same_v<T, float>) {
        activation_forward_f32(a.activation, row, bias, cols);
      } else {
        visit_activation(a.activation, [&](auto act, auto) { forward_row(row, bias, cols, act); });
      }
    }
    if (a.dropout.enabled) dropout_row(row, cols, static_cast<std::uint64_t>(first_row + r), a.dropout);
  }
}

template <class T>
void apply_epilogue_backward(const T* dy, std::int64_t ld_dy, T* g, std::int64_t ld, std::int64_t rows,
                             std::int64_t cols, std::int64_t first_row, const EpilogueArgs<T>& a) {
  Scratch<T> room;
  const T* bias = contiguous_bias(a, cols, room);
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* d = dy + r * ld_dy;
    T* row = g + r * ld;
    if (a.activation == Activation::none) {  // G = dy: H is not read
      std::copy(d, d + cols, row);
    } else if constexpr (std::is_same_v<T, float>) {
      activation_backward_f32(a.activation, d, row, bias, cols);
    } else {
      visit_activation(a.activation, [&](auto, auto grad) { backward_row(d, row, bias, cols, grad); });
    }
    // The dropout backward is the forward's mask and scale applied to the gradient.
    if (a.dropout.enabled) dropout_row(row, cols, static_cast<std::uint64_t>(first_row + r), a.dropout);
  }
}

namespace {

/// Rows per worker task: about 32k elements, so that small blocks stay on one thread.
std::int64_t grain_rows(std::int64_t cols) { return std::max<std::int64_t>(1, (std::int64_t{1} << 15) / std::max<std::int64_t>(cols, 1)); }

}  // namespace

template <class T>
void inner_activation_forward(Activation sigma, const T* src, std::int64_t ld_src, T* dst, std::int64_t ld_dst,
                              std::int64_t rows, std::int64_t cols) {
  if (rows == 0 || cols == 0) return;
  parallel_for(rows, grain_rows(cols), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      T* out = dst + i * ld_dst;
      if (out != src + i * ld_src) std::copy(src + i * ld_src, src + i * ld_src + cols, out);
      if constexpr (std::is_same_v<T, float>) {
        activation_forward_f32(sigma, out, nullptr, cols);
      } else {
        visit_activation(sigma, [&](auto act, auto) { forward_row(out, nullptr, cols, act); });
      }
    }
  });
}

template <class T>
void inner_activation_backward(Activation sigma, const T* z, std::int64_t ld_z, T* g, std::int64_t ld_g,
                               std::int64_t rows, std::int64_t cols) {
  if (rows == 0 || cols == 0 || sigma == Activation::none) return;
  parallel_for(rows, grain_rows(cols), [&](std::int64_t b, std::int64_t e) {
    Scratch<T> row(cols);  // σ′ is evaluated over a copy of z's row: the kernels work in place
    for (std::int64_t i = b; i < e; ++i) {
      T* gi = g + i * ld_g;
      std::copy(z + i * ld_z, z + i * ld_z + cols, row.data());
      if constexpr (std::is_same_v<T, float>) {
        activation_backward_f32(sigma, gi, row.data(), nullptr, cols);
      } else {
        visit_activation(sigma, [&](auto, auto grad) { backward_row(gi, row.data(), nullptr, cols, grad); });
      }
      std::copy(row.data(), row.data() + cols, gi);
    }
  });
}

template void inner_activation_forward<float>(Activation, const float*, std::int64_t, float*, std::int64_t,
                                              std::int64_t, std::int64_t);
template void inner_activation_forward<double>(Activation, const double*, std::int64_t, double*, std::int64_t,
                                               std::int64_t, std::int64_t);
template void inner_activation_backward<float>(Activation, const float*, std::int64_t, float*, std::int64_t,
                                               std::int64_t, std::int64_t);
template void inner_activation_backward<double>(Activation, const double*, std::int64_t, double*, std::int64_t,
                                                std::int64_t, std::int64_t);

template void apply_epilogue<float>(float*, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                    const EpilogueArgs<float>&);
template void apply_epilogue<double>(double*, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                     const EpilogueArgs<double>&);
template void apply_epilogue_backward<float>(const float*, std::int64_t, float*, std::int64_t, std::int64_t,
                                             std::int64_t, std::int64_t, const EpilogueArgs<float>&);
template void apply_epilogue_backward<double>(const double*, std::int64_t, double*, std::int64_t, std::int64_t,
                                              std::int64_t, std::int64_t, const EpilogueArgs<double>&);

}  // namespace sketchcore::detail
