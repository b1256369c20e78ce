#include "detail/epilogue_cpu.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "detail/activations.hpp"
#include "detail/philox.hpp"

namespace sketchcore::detail {

namespace {

template <class T, class Grad>
void activation_backward_rows(const T* dy, std::int64_t ld_dy, T* g, std::int64_t ld, std::int64_t rows,
                              std::int64_t cols, const T* bias, std::int64_t bias_stride, Grad grad) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* d = dy + r * ld_dy;
    T* row = g + r * ld;
    if (bias) {
      for (std::int64_t j = 0; j < cols; ++j) row[j] = d[j] * grad(row[j] + bias[j * bias_stride]);
    } else {
      for (std::int64_t j = 0; j < cols; ++j) row[j] = d[j] * grad(row[j]);
    }
  }
}

template <class T, class Act>
void bias_activation_rows(T* y, std::int64_t rows, std::int64_t cols, std::int64_t ld, const T* bias,
                          std::int64_t bias_stride, Act act) {
  for (std::int64_t r = 0; r < rows; ++r) {
    T* row = y + r * ld;
    if (bias) {
      for (std::int64_t j = 0; j < cols; ++j) row[j] = act(row[j] + bias[j * bias_stride]);
    } else {
      for (std::int64_t j = 0; j < cols; ++j) row[j] = act(row[j]);
    }
  }
}

template <class T>
void dropout_rows(T* y, std::int64_t rows, std::int64_t cols, std::int64_t ld, std::int64_t first_row,
                  const DropoutPlan& d) {
  const T keep_scale = static_cast<T>(d.keep_scale);
  for (std::int64_t r = 0; r < rows; ++r) {
    T* row = y + r * ld;
    if (d.drop_all) {
      std::fill(row, row + cols, T(0));
      continue;
    }
    const auto global_row = static_cast<std::uint64_t>(first_row + r);
    for (std::int64_t j0 = 0; j0 < cols; j0 += 4) {
      const Philox4x32 words = dropout_words(d, global_row, static_cast<std::uint64_t>(j0 / 4));
      const std::int64_t n = std::min<std::int64_t>(4, cols - j0);
      for (std::int64_t l = 0; l < n; ++l) {
        row[j0 + l] = dropout_keeps(d, words.v[l]) ? row[j0 + l] * keep_scale : T(0);
      }
    }
  }
}

}  // namespace

template <class T>
void apply_epilogue(T* y, std::int64_t rows, std::int64_t cols, std::int64_t ld, std::int64_t first_row,
                    const EpilogueArgs<T>& a) {
  visit_activation(a.activation, [&](auto act, auto) {
    if (!std::is_same_v<decltype(act), Identity> || a.bias) {
      bias_activation_rows(y, rows, cols, ld, a.bias, a.bias_stride, act);
    }
  });
  if (a.dropout.enabled) dropout_rows(y, rows, cols, ld, first_row, a.dropout);
}

template <class T>
void apply_epilogue_backward(const T* dy, std::int64_t ld_dy, T* g, std::int64_t ld, std::int64_t rows,
                             std::int64_t cols, std::int64_t first_row, const EpilogueArgs<T>& a) {
  visit_activation(a.activation, [&](auto act, auto grad) {
    if constexpr (std::is_same_v<decltype(act), Identity>) {  // G = dy: H is not read
      for (std::int64_t r = 0; r < rows; ++r) std::copy(dy + r * ld_dy, dy + r * ld_dy + cols, g + r * ld);
    } else {
      activation_backward_rows(dy, ld_dy, g, ld, rows, cols, a.bias, a.bias_stride, grad);
    }
  });
  // The dropout backward is the forward's mask and scale applied to the gradient.
  if (a.dropout.enabled) dropout_rows(g, rows, cols, ld, first_row, a.dropout);
}

template void apply_epilogue<float>(float*, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                    const EpilogueArgs<float>&);
template void apply_epilogue<double>(double*, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                     const EpilogueArgs<double>&);
template void apply_epilogue_backward<float>(const float*, std::int64_t, float*, std::int64_t, std::int64_t,
                                             std::int64_t, std::int64_t, const EpilogueArgs<float>&);
template void apply_epilogue_backward<double>(const double*, std::int64_t, double*, std::int64_t, std::int64_t,
                                              std::int64_t, std::int64_t, const EpilogueArgs<double>&);

}  // namespace sketchcore::detail
