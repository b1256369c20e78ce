// The CPU epilogue: y = dropout(activation(y + bias[col])) over a row-major block, in
// place, one pass over each element while the block is still in cache.
#pragma once

#include <cstdint>

#include "detail/activations.hpp"
#include "sketchcore/epilogue.hpp"

namespace sketchcore::detail {

/// Applies `args` to a rows × cols row-major block with leading dimension `ld`, in place,
/// on the calling thread. `first_row` is the block's first row in the whole output: the
/// dropout mask depends on global (row, col), never on how the output is split.
template <class T>
void apply_epilogue(T* y, std::int64_t rows, std::int64_t cols, std::int64_t ld, std::int64_t first_row,
                    const EpilogueArgs<T>& args);

/// Backward of the epilogue over a block, in place: on entry `g` holds H = scale·Z·Up
/// (without the bias) when the activation needs it, anything otherwise; on exit it holds
/// G = dy ⊙ keep/(1 − p) ⊙ act′(H + bias). `dy` is read with leading dimension ld_dy.
template <class T>
void apply_epilogue_backward(const T* dy, std::int64_t ld_dy, T* g, std::int64_t ld, std::int64_t rows,
                             std::int64_t cols, std::int64_t first_row, const EpilogueArgs<T>& args);

/// The inner activation of a bottleneck layer over a rows × cols block on sketchcore's workers:
/// dst = σ(src) (each with its leading dimension; dst may be src, in place).
template <class T>
void inner_activation_forward(Activation sigma, const T* src, std::int64_t ld_src, T* dst, std::int64_t ld_dst,
                              std::int64_t rows, std::int64_t cols);

/// Its backward over a rows × cols block on sketchcore's workers, in place: g = g ⊙ σ′(z).
template <class T>
void inner_activation_backward(Activation sigma, const T* z, std::int64_t ld_z, T* g, std::int64_t ld_g,
                               std::int64_t rows, std::int64_t cols);

}  // namespace sketchcore::detail
