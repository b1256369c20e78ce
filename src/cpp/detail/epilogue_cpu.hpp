// The CPU epilogue: y = activation(y + bias[col]) over a row-major block, in place.
#pragma once

#include <cstdint>

#include "sketchcore/epilogue.hpp"

namespace sketchcore::detail {

/// Applies bias (optional: `bias` may be null; `bias_stride` in elements) and
/// `activation` to a rows × cols row-major block with leading dimension `ld`, in place.
/// Does nothing when there is neither bias nor activation. Parallel over rows.
template <class T>
void apply_epilogue(T* y, std::int64_t rows, std::int64_t cols, std::int64_t ld, const T* bias,
                    std::int64_t bias_stride, Activation activation);

}  // namespace sketchcore::detail
