#include "cpu/half.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "detail/parallel.hpp"

namespace sketchcore::detail {

namespace {

/// Calls fn(element_offset, linear_index) for every element of `view` in row-major order.
template <class Fn>
void for_each_element(const TensorView& view, Fn&& fn) {
  const std::int64_t count = view.numel();
  if (count == 0) return;
  const int nd = view.ndim();
  std::vector<std::int64_t> index(static_cast<std::size_t>(nd), 0);
  std::int64_t offset = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    fn(offset, i);
    for (int d = nd - 1; d >= 0; --d) {  // odometer over the multi-index
      auto& k = index[static_cast<std::size_t>(d)];
      offset += view.stride(d);
      if (++k < view.size(d)) break;
      offset -= view.stride(d) * view.size(d);
      k = 0;
    }
  }
}

/// Whether the view's last dimension is contiguous: then it is converted a row at a time by
/// the vectorised bulk conversions (cpu/convert_kernels.cpp), rows split over the workers.
bool rows_contiguous(const TensorView& view) { return view.ndim() >= 1 && view.stride(view.ndim() - 1) == 1; }

/// Calls fn(row_offset, row_index) for every row (last dimension) of `view`, on the workers.
template <class Fn>
void for_each_row(const TensorView& view, Fn&& fn) {
  const int nd = view.ndim();
  const std::int64_t cols = view.size(nd - 1), rows = cols == 0 ? 0 : view.numel() / cols;
  if (rows == 0) return;
  // A memory-bound pass: a second thread pays off beyond ~256 KiB.
  const std::int64_t grain = std::max<std::int64_t>(1, (std::int64_t{1} << 16) / std::max<std::int64_t>(cols, 1));
  parallel_for(rows, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      std::int64_t offset = 0, rest = r;  // the row's multi-index, last leading dimension fastest
      for (int d = nd - 2; d >= 0; --d) {
        offset += (rest % view.size(d)) * view.stride(d);
        rest /= view.size(d);
      }
      fn(offset, r);
    }
  });
}

float load(const TensorView& view, std::int64_t offset) {
  const std::uint16_t bits = static_cast<const std::uint16_t*>(view.data())[offset];
  return view.dtype() == DType::float16 ? float16_to_float(bits) : bfloat16_to_float(bits);
}

}  // namespace

Widened::Widened(const TensorView& view) : view_(view) {
  if (!is_half(view.dtype())) return;
  float* dst = storage_.allocate(view.numel());
  if (rows_contiguous(view)) {
    const std::int64_t cols = view.size(view.ndim() - 1);
    const auto* src = static_cast<const std::uint16_t*>(view.data());
    for_each_row(view, [&](std::int64_t offset, std::int64_t r) { widen_half(view.dtype(), src + offset, dst + r * cols, cols); });
  } else {
    for_each_element(view, [&](std::int64_t offset, std::int64_t i) { dst[i] = load(view, offset); });
  }
  view_ = TensorView(dst, DType::float32, view.shape(), {}, view.device());
}

Narrowed::Narrowed(const TensorView& destination) : destination_(destination), view_(destination) {
  if (!is_half(destination.dtype())) return;
  view_ = TensorView(storage_.allocate(destination.numel()), DType::float32, destination.shape(), {},
                     destination.device());
}

void Narrowed::store() const {
  if (!is_half(destination_.dtype())) return;
  const float* src = static_cast<const float*>(view_.data());
  auto* dst = static_cast<std::uint16_t*>(destination_.data());
  if (rows_contiguous(destination_)) {
    const std::int64_t cols = destination_.size(destination_.ndim() - 1);
    for_each_row(destination_, [&](std::int64_t offset, std::int64_t r) {
      narrow_half(destination_.dtype(), src + r * cols, dst + offset, cols);
    });
    return;
  }
  const bool f16 = destination_.dtype() == DType::float16;
  for_each_element(destination_, [&](std::int64_t offset, std::int64_t i) {
    dst[offset] = f16 ? float_to_float16(src[i]) : float_to_bfloat16(src[i]);
  });
}

}  // namespace sketchcore::detail
