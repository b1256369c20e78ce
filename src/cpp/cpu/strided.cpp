#include "detail/strided.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cpu/half.hpp"
#include "detail/parallel.hpp"

namespace sketchcore::detail {

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
  if constexpr (std::is_same_v<T, float>) {
    if (is_half(view.dtype())) {  // a 16-bit view widened row by row (vectorised when contiguous)
      const bool f16 = view.dtype() == DType::float16;
      for_each_row<std::uint16_t>(view, begin, end, [&](std::int64_t r, const std::uint16_t* row) {
        float* out = dst + (r - begin) * cols;
        if (cs == 1) {
          widen_half(view.dtype(), row, out, cols);
        } else {
          for (std::int64_t j = 0; j < cols; ++j) out[j] = f16 ? float16_to_float(row[j * cs]) : bfloat16_to_float(row[j * cs]);
        }
      });
      return;
    }
  }
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
  if constexpr (std::is_same_v<T, float>) {
    if (is_half(view.dtype())) {  // rounded into a 16-bit view row by row
      const bool f16 = view.dtype() == DType::float16;
      for_each_row<std::uint16_t>(view, begin, end, [&](std::int64_t r, std::uint16_t* row) {
        const float* in = src + (r - begin) * ld;
        if (cs == 1) {
          narrow_half(view.dtype(), in, row, cols);
        } else {
          for (std::int64_t j = 0; j < cols; ++j) row[j * cs] = f16 ? float_to_float16(in[j]) : float_to_bfloat16(in[j]);
        }
      });
      return;
    }
  }
  for_each_row<T>(view, begin, end, [&](std::int64_t r, T* row) {
    const T* in = src + (r - begin) * ld;
    for (std::int64_t j = 0; j < cols; ++j) row[j * cs] = in[j];
  });
}

template <class T>
void gather_rows_parallel(const TensorView& view, std::int64_t begin, std::int64_t end, T* dst) {
  const std::int64_t cols = view.size(-1);
  parallel_for(end - begin, row_grain(cols), [&](std::int64_t b, std::int64_t e) {
    gather_rows<T>(view, begin + b, begin + e, dst + b * cols);
  });
}

template <class T>
void pack_rows(const TensorView& view, T* dst) {
  gather_rows_parallel<T>(view, 0, count_rows(view), dst);
}

template void gather_rows<float>(const TensorView&, std::int64_t, std::int64_t, float*);
template void gather_rows<double>(const TensorView&, std::int64_t, std::int64_t, double*);
template void scatter_rows<float>(const float*, std::int64_t, const TensorView&, std::int64_t, std::int64_t);
template void scatter_rows<double>(const double*, std::int64_t, const TensorView&, std::int64_t, std::int64_t);
template void gather_rows_parallel<float>(const TensorView&, std::int64_t, std::int64_t, float*);
template void gather_rows_parallel<double>(const TensorView&, std::int64_t, std::int64_t, double*);
template void pack_rows<float>(const TensorView&, float*);
template void pack_rows<double>(const TensorView&, double*);

}  // namespace sketchcore::detail
