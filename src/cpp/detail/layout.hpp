// Backend-neutral layout analysis of strided views (core code, used by the validation and by
// every backend): a view as a matrix of its rows, the one matrix-operand type that BLAS and
// cuBLASLt both take, batches of matrices, overlap and uniqueness of elements.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

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

/// A read-only matrix operand in row-major terms, as a GEMM takes it: `transposed` means the
/// memory holds the matrix column by column (its transpose is row-major with leading
/// dimension `ld`). T is the element type (void for type-erased device operands).
template <class T>
struct MatrixOperand {
  const T* data;
  bool transposed;
  std::int64_t ld;
};

/// The operand for a rows × cols matrix at `data` with the given strides, when one exists
/// without copying: unit column stride (row-major) or unit row stride (column-major), and a
/// leading dimension that keeps rows (columns) from overlapping.
template <class T>
std::optional<MatrixOperand<T>> operand_in_place(const T* data, std::int64_t rows, std::int64_t cols,
                                                 std::int64_t row_stride, std::int64_t col_stride) {
  const std::int64_t min_cols = cols > 1 ? cols : 1, min_rows = rows > 1 ? rows : 1;
  if (cols <= 1 || col_stride == 1) {
    const std::int64_t ld = rows <= 1 ? min_cols : row_stride;
    if (ld >= min_cols) return MatrixOperand<T>{data, false, ld};
  }
  if (rows <= 1 || row_stride == 1) {
    const std::int64_t ld = cols <= 1 ? min_rows : col_stride;
    if (ld >= min_rows) return MatrixOperand<T>{data, true, ld};
  }
  return std::nullopt;
}

/// The operand for a whole view (a matrix of its rows), if its layout has one.
template <class T>
std::optional<MatrixOperand<T>> operand_in_place(const TensorView& view) {
  const RowMatrix m = as_row_matrix(view);
  if (!m.row_stride) return std::nullopt;
  return operand_in_place(static_cast<const T*>(view.data()), m.rows, m.cols, *m.row_stride, m.col_stride);
}

/// Rows [first, …) and columns [first, …) of an operand (no copy); E is the element type
/// used for the address arithmetic (T itself, or the real type of a void operand).
template <class E, class T>
MatrixOperand<T> rows_from(const MatrixOperand<T>& m, std::int64_t first) {
  const auto* base = static_cast<const E*>(static_cast<const void*>(m.data));
  return {static_cast<const T*>(static_cast<const void*>(base + (m.transposed ? first : first * m.ld))),
          m.transposed, m.ld};
}
template <class E, class T>
MatrixOperand<T> cols_from(const MatrixOperand<T>& m, std::int64_t first) {
  const auto* base = static_cast<const E*>(static_cast<const void*>(m.data));
  return {static_cast<const T*>(static_cast<const void*>(base + (m.transposed ? first * m.ld : first))),
          m.transposed, m.ld};
}

/// The transpose of an operand (no copy).
template <class T>
MatrixOperand<T> transposed(MatrixOperand<T> m) {
  m.transposed = !m.transposed;
  return m;
}

/// For an S-shaped view ((d_in, k) or (terms, d_in, k)): the one column stride of the
/// d_in × terms·k matrix [S_1 … S_terms] when its (terms, k) columns collapse into one
/// stride (then it can be read in place), else nullopt.
std::optional<std::int64_t> sketch_column_stride(const TensorView& S, std::int64_t rank) noexcept;

/// A 1-D operand as a 2-D view: (len, 1) when `column`, else (1, len); others unchanged.
TensorView as_matrix(const TensorView& v, bool column);

/// Element offsets of every matrix of a batch (all dimensions of `v` but the last two).
std::vector<std::int64_t> batch_offsets(const TensorView& v);

/// The matrix (last two dimensions) of `v` that starts `offset` elements into it.
TensorView matrix_at(const TensorView& v, std::int64_t offset);

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
