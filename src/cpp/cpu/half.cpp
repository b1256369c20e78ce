#include "cpu/half.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

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

float load(const TensorView& view, std::int64_t offset) {
  const std::uint16_t bits = static_cast<const std::uint16_t*>(view.data())[offset];
  return view.dtype() == DType::float16 ? float16_to_float(bits) : bfloat16_to_float(bits);
}

}  // namespace

Widened::Widened(const TensorView& view) : view_(view) {
  if (!is_half(view.dtype())) return;
  float* dst = storage_.allocate(view.numel());
  for_each_element(view, [&](std::int64_t offset, std::int64_t i) { dst[i] = load(view, offset); });
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
  const bool f16 = destination_.dtype() == DType::float16;
  for_each_element(destination_, [&](std::int64_t offset, std::int64_t i) {
    dst[offset] = f16 ? float_to_float16(src[i]) : float_to_bfloat16(src[i]);
  });
}

}  // namespace sketchcore::detail
