// Layout analysis for strided views on the CPU: when can a view be handed to BLAS in
// place, and how to gather/scatter it when it cannot.
#pragma once

#include <cstdint>
#include <optional>

#include "detail/blas.hpp"
#include "sketchcore/tensor.hpp"

namespace sketchcore::detail {

/// A view of shape (..., cols) seen as a rows × cols matrix.
struct RowMatrix {
  std::int64_t rows = 0;        ///< product of the leading extents
  std::int64_t cols = 0;        ///< last extent
  std::int64_t col_stride = 1;  ///< stride of the last dimension
  /// Stride between consecutive rows when the leading dimensions collapse into one
  /// (any value when rows ≤ 1); empty when they do not collapse.
  std::optional<std::int64_t> row_stride;
};

/// Describes `view` (ndim ≥ 1) as a matrix of its rows.
RowMatrix as_row_matrix(const TensorView& view);

/// The BLAS operand for a rows × cols matrix at `data` with the given strides, when one
/// exists without copying: unit column stride (row-major) or unit row stride (column-major),
/// and a leading dimension that keeps rows (columns) from overlapping.
template <class T>
std::optional<BlasMatrix<T>> blas_operand(const T* data, std::int64_t rows, std::int64_t cols,
                                          std::int64_t row_stride, std::int64_t col_stride) {
  const std::int64_t min_cols = cols > 1 ? cols : 1, min_rows = rows > 1 ? rows : 1;
  if (cols <= 1 || col_stride == 1) {
    const std::int64_t ld = rows <= 1 ? min_cols : row_stride;
    if (ld >= min_cols) return BlasMatrix<T>{data, false, ld};
  }
  if (rows <= 1 || row_stride == 1) {
    const std::int64_t ld = cols <= 1 ? min_rows : col_stride;
    if (ld >= min_rows) return BlasMatrix<T>{data, true, ld};
  }
  return std::nullopt;
}

/// The BLAS operand for a whole RowMatrix view, if it has one.
template <class T>
std::optional<BlasMatrix<T>> blas_operand(const TensorView& view, const RowMatrix& m) {
  if (!m.row_stride) return std::nullopt;
  return blas_operand(static_cast<const T*>(view.data()), m.rows, m.cols, *m.row_stride, m.col_stride);
}

/// Copies rows [begin, end) of `view` (..., cols) into compact row-major `dst`.
template <class T>
void gather_rows(const TensorView& view, std::int64_t begin, std::int64_t end, T* dst);

/// Copies a row-major block `src` (end − begin rows, leading dimension ld) into rows
/// [begin, end) of `view` (..., cols).
template <class T>
void scatter_rows(const T* src, std::int64_t ld, const TensorView& view, std::int64_t begin, std::int64_t end);

/// Copies the whole of `view` into compact row-major `dst`, in parallel.
template <class T>
void pack_rows(const TensorView& view, T* dst);

/// For an S-shaped view ((d_in, k) or (terms, d_in, k)): the one column stride of the
/// d_in × terms·k matrix [S_1 … S_terms] when its (terms, k) columns collapse into one
/// stride (then it can be read in place), else nullopt.
std::optional<std::int64_t> sketch_column_stride(const TensorView& S, std::int64_t rank) noexcept;

/// Byte range [first, last) that the elements of `view` occupy; first == last when empty.
struct ByteRange {
  std::uintptr_t first = 0;
  std::uintptr_t last = 0;
};
ByteRange byte_range(const TensorView& view) noexcept;

/// True when the two views share at least one byte.
bool overlaps(const TensorView& a, const TensorView& b) noexcept;

/// True when no two distinct indices of `view` address the same element.
bool has_unique_elements(const TensorView& view) noexcept;

}  // namespace sketchcore::detail
