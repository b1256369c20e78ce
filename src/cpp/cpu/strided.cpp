#include "detail/strided.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "detail/parallel.hpp"

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

namespace {

/// Calls fn(row_index, pointer_to_row) for rows [begin, end) of `view` in row-major order.
template <class T, class Fn>
void for_each_row(const TensorView& view, std::int64_t begin, std::int64_t end, Fn&& fn) {
  if (begin >= end) return;
  const int lead = view.ndim() - 1;
  // Multi-index and address of row `begin`.
  std::vector<std::int64_t> index(static_cast<std::size_t>(lead), 0);
  T* row = static_cast<T*>(view.data());
  for (std::int64_t rest = begin, d = lead - 1; d >= 0; --d) {
    const std::int64_t extent = view.size(static_cast<int>(d));
    index[static_cast<std::size_t>(d)] = rest % extent;
    row += (rest % extent) * view.stride(static_cast<int>(d));
    rest /= extent;
  }
  for (std::int64_t r = begin; r < end; ++r) {
    fn(r, row);
    // Advance the multi-index like an odometer, moving the row pointer along.
    for (int d = lead - 1; d >= 0; --d) {
      auto& i = index[static_cast<std::size_t>(d)];
      row += view.stride(d);
      if (++i < view.size(d)) break;
      row -= view.stride(d) * view.size(d);
      i = 0;
    }
  }
}

std::int64_t count_rows(const TensorView& view) {
  std::int64_t rows = 1;
  for (int d = 0; d + 1 < view.ndim(); ++d) rows *= view.size(d);
  return rows;
}

/// Rows per parallel chunk so that each chunk moves at least ~256 KiB.
std::int64_t row_grain(std::int64_t cols) {
  return std::max<std::int64_t>(1, (std::int64_t{1} << 16) / std::max<std::int64_t>(cols, 1));
}

}  // namespace

template <class T>
void gather_rows(const TensorView& view, std::int64_t begin, std::int64_t end, T* dst) {
  const std::int64_t cols = view.size(-1), cs = view.stride(-1);
  for_each_row<T>(view, begin, end, [&](std::int64_t r, const T* row) {
    T* out = dst + (r - begin) * cols;
    if (cs == 1) {
      std::memcpy(out, row, static_cast<std::size_t>(cols) * sizeof(T));
    } else {
      for (std::int64_t j = 0; j < cols; ++j) out[j] = row[j * cs];
    }
  });
}

template <class T>
void scatter_rows(const T* src, std::int64_t ld, const TensorView& view, std::int64_t begin, std::int64_t end) {
  const std::int64_t cols = view.size(-1), cs = view.stride(-1);
  for_each_row<T>(view, begin, end, [&](std::int64_t r, T* row) {
    const T* in = src + (r - begin) * ld;
    for (std::int64_t j = 0; j < cols; ++j) row[j * cs] = in[j];
  });
}

template <class T>
void pack_rows(const TensorView& view, T* dst) {
  const std::int64_t cols = view.size(-1);
  parallel_for(count_rows(view), row_grain(cols), [&](std::int64_t begin, std::int64_t end) {
    gather_rows<T>(view, begin, end, dst + begin * cols);
  });
}

template void gather_rows<float>(const TensorView&, std::int64_t, std::int64_t, float*);
template void gather_rows<double>(const TensorView&, std::int64_t, std::int64_t, double*);
template void scatter_rows<float>(const float*, std::int64_t, const TensorView&, std::int64_t, std::int64_t);
template void scatter_rows<double>(const double*, std::int64_t, const TensorView&, std::int64_t, std::int64_t);
template void pack_rows<float>(const TensorView&, float*);
template void pack_rows<double>(const TensorView&, double*);

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

}  // namespace sketchcore::detail
