// The CPU backend's copies of strided views that BLAS cannot read in place: gather rows into
// a compact block, scatter a block back (layout analysis itself: detail/layout.hpp).
#pragma once

#include <cstdint>

#include "detail/layout.hpp"
#include "sketchcore/tensor.hpp"

namespace sketchcore::detail {

/// Copies rows [begin, end) of `view` (..., cols) into compact row-major `dst`. With T = float
/// the view may also be float16 or bfloat16: its rows are widened on the way.
template <class T>
void gather_rows(const TensorView& view, std::int64_t begin, std::int64_t end, T* dst);

/// gather_rows with the rows split over the workers (a pass over memory: a second thread pays
/// off beyond ~256 KiB).
template <class T>
void gather_rows_parallel(const TensorView& view, std::int64_t begin, std::int64_t end, T* dst);

/// Copies a row-major block `src` (end − begin rows, leading dimension ld) into rows
/// [begin, end) of `view` (..., cols). With T = float the view may also be float16 or
/// bfloat16: the rows are rounded into it.
template <class T>
void scatter_rows(const T* src, std::int64_t ld, const TensorView& view, std::int64_t begin, std::int64_t end);

/// Copies the whole of `view` into compact row-major `dst`, in parallel.
template <class T>
void pack_rows(const TensorView& view, T* dst);

/// Sp = [S_1 … S_T] into compact row-major `dst` (d_in × T·k): row i is S_1[i, :], …,
/// S_T[i, :], from `S` (T, d_in, k) or (d_in, k) of any strides; on the workers beyond 1 MiB.
/// T is any type of S's element size (a bit copy: std::uint16_t for 16-bit S).
template <class T>
void pack_terms(const TensorView& S, std::int64_t terms, std::int64_t rank, T* dst);

}  // namespace sketchcore::detail
