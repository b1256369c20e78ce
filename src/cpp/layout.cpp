// Backend-neutral layout analysis (see detail/layout.hpp).
#include "detail/layout.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <utility>
#include <vector>

namespace sketchcore::detail {

RowMatrix as_row_matrix(const TensorView& view) {
  RowMatrix m;
  const int nd = view.ndim();
  m.cols = view.size(-1);
  m.col_stride = view.stride(-1);
  m.rows = 1;
  for (int d = 0; d + 1 < nd; ++d) m.rows *= view.size(d);
  // Walk the leading dimensions from the innermost outwards: each one of extent > 1 must
  // step exactly over the dimensions inside it.
  std::optional<std::int64_t> stride;
  std::int64_t span = 1;  // rows covered by the dimensions already walked
  for (int d = nd - 2; d >= 0; --d) {
    const std::int64_t extent = view.size(d);
    if (extent == 1) continue;
    if (!stride) {
      stride = view.stride(d);
    } else if (view.stride(d) != *stride * span) {
      return m;  // does not collapse
    }
    span *= extent;
  }
  m.row_stride = stride ? *stride : std::max<std::int64_t>(m.cols, 1) * std::max<std::int64_t>(m.col_stride, 1);
  return m;
}

ByteRange byte_range(const TensorView& view) noexcept {
  if (view.numel() == 0) return {};
  const auto esize = static_cast<std::int64_t>(dtype_size(view.dtype()));
  std::int64_t lo = 0, hi = 0;
  for (int d = 0; d < view.ndim(); ++d) {
    const std::int64_t reach = (view.size(d) - 1) * view.stride(d) * esize;
    (reach < 0 ? lo : hi) += reach;
  }
  const auto base = reinterpret_cast<std::uintptr_t>(view.data());
  return {base + static_cast<std::uintptr_t>(lo), base + static_cast<std::uintptr_t>(hi + esize)};
}

std::optional<std::int64_t> sketch_column_stride(const TensorView& S, std::int64_t rank) noexcept {
  if (S.ndim() == 2 || S.size(0) <= 1) return S.stride(-1);
  if (rank == 1) return S.stride(0);
  if (S.stride(0) == rank * S.stride(-1)) return S.stride(-1);
  return std::nullopt;
}

bool overlaps(const TensorView& a, const TensorView& b) noexcept {
  const ByteRange ra = byte_range(a), rb = byte_range(b);
  if (ra.first == ra.last || rb.first == rb.last) return false;
  return ra.first < rb.last && rb.first < ra.last;
}

bool has_unique_elements(const TensorView& view) noexcept {
  if (view.numel() <= 1) return true;
  // Sort the dimensions of extent > 1 by |stride|; each must step past everything that
  // the smaller-stride dimensions can reach.
  std::vector<std::pair<std::int64_t, std::int64_t>> dims;  // (|stride|, extent)
  for (int d = 0; d < view.ndim(); ++d) {
    if (view.size(d) > 1) dims.emplace_back(std::abs(view.stride(d)), view.size(d));
  }
  std::sort(dims.begin(), dims.end());
  std::int64_t reach = 0;  // largest offset reachable by the dimensions seen so far
  for (const auto& [stride, extent] : dims) {
    if (stride <= reach) return false;
    reach += stride * (extent - 1);
  }
  return true;
}

/// 2-D views of one batch element: the last two dimensions of `v` at `offset` elements.
TensorView matrix_at(const TensorView& v, std::int64_t offset) {
  const std::size_t esize = dtype_size(v.dtype());
  return TensorView(static_cast<char*>(v.data()) + offset * static_cast<std::int64_t>(esize), v.dtype(),
                    {v.size(-2), v.size(-1)}, {v.stride(-2), v.stride(-1)}, v.device());
}

/// Element offsets of every batch element (all dimensions but the last two).
std::vector<std::int64_t> batch_offsets(const TensorView& v) {
  std::vector<std::int64_t> offsets{0};
  for (int d = 0; d + 2 < v.ndim(); ++d) {
    std::vector<std::int64_t> next;
    next.reserve(offsets.size() * static_cast<std::size_t>(v.size(d)));
    for (std::int64_t o : offsets) {
      for (std::int64_t i = 0; i < v.size(d); ++i) next.push_back(o + i * v.stride(d));
    }
    offsets.swap(next);
  }
  return offsets;
}

/// A 1-D operand as a 2-D view: (len, 1) when it is the left operand's column, (1, len)
/// when it is a row.
TensorView as_matrix(const TensorView& v, bool column) {
  if (v.ndim() != 1) return v;
  if (column) return TensorView(v.data(), v.dtype(), {v.size(0), 1}, {v.stride(0), 1}, v.device());
  return TensorView(v.data(), v.dtype(), {1, v.size(0)}, {1, v.stride(0)}, v.device());
}


}  // namespace sketchcore::detail
