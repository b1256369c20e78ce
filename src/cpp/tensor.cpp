#include "sketchcore/tensor.hpp"

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "detail/check.hpp"
#include "detail/checked.hpp"
#include "sketchcore/errors.hpp"

namespace sketchcore {

const char* dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::float16: return "float16";
    case DType::bfloat16: return "bfloat16";
    case DType::float32: return "float32";
    case DType::float64: return "float64";
  }
  return "unknown";
}

std::size_t dtype_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::float16:
    case DType::bfloat16: return 2;
    case DType::float32: return 4;
    case DType::float64: return 8;
  }
  return 0;
}

std::string device_name(const Device& device) {
  if (device.type == DeviceType::cpu) return "cpu";
  return "cuda:" + std::to_string(device.index);
}

std::string shape_to_string(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

TensorView::TensorView(void* data, DType dtype, std::vector<std::int64_t> shape,
                       std::vector<std::int64_t> strides, Device device)
    : data_(data), dtype_(dtype), device_(device), shape_(std::move(shape)), strides_(std::move(strides)) {
  for (std::int64_t extent : shape_) {
    if (extent < 0) {
      detail::fail<shape_error>("TensorView", "shape", "non-negative extents", shape_to_string(shape_));
    }
  }
  // numel() and every element offset must be representable: a producer may hand over
  // extents (stride-0 views, foreign DLPack tensors) whose products overflow 64 bits.
  std::optional<std::int64_t> count = 1;
  for (std::int64_t extent : shape_) count = count ? detail::checked_mul(*count, extent) : std::nullopt;
  if (!count && numel_is_nonzero()) {
    detail::fail<shape_error>("TensorView", "shape", "extents whose product fits in a signed 64-bit integer",
                              shape_to_string(shape_));
  }
  if (strides_.empty()) {
    strides_.resize(shape_.size());
    std::int64_t running = 1;
    for (std::size_t i = shape_.size(); i-- > 0;) {
      strides_[i] = running;
      // Cannot overflow for a non-empty view (numel fits); an empty one may have any strides.
      running = detail::checked_mul(running, shape_[i] > 0 ? shape_[i] : 1).value_or(0);
    }
  } else if (strides_.size() != shape_.size()) {
    detail::fail<shape_error>("TensorView", "strides", std::to_string(shape_.size()) + " strides (one per dimension)",
                              std::to_string(strides_.size()));
  }
  if (!offsets_fit()) {
    detail::fail<shape_error>("TensorView", "strides",
                              "strides whose largest byte offset fits in a signed 64-bit integer",
                              shape_to_string(strides_) + " for shape " + shape_to_string(shape_));
  }
}

bool TensorView::numel_is_nonzero() const noexcept {
  for (std::int64_t extent : shape_) {
    if (extent == 0) return false;
  }
  return true;
}

bool TensorView::offsets_fit() const noexcept {
  if (!numel_is_nonzero()) return true;
  std::int64_t span = 0;  // Σ |stride| · (extent − 1): the distance between the extreme elements
  for (std::size_t i = 0; i < shape_.size(); ++i) {
    const std::int64_t stride = strides_[i];
    if (stride == std::numeric_limits<std::int64_t>::min()) return false;
    const std::optional<std::int64_t> reach = detail::checked_mul(stride < 0 ? -stride : stride, shape_[i] - 1);
    if (!reach || __builtin_add_overflow(span, *reach, &span)) return false;
  }
  return detail::checked_mul(span, static_cast<std::int64_t>(dtype_size(dtype_))).has_value();
}

namespace {

/// Index of dimension `dim` (negative counts from the end) of an `ndim`-dimensional view.
std::size_t checked_dim(int dim, int ndim, const char* op) {
  const int d = dim < 0 ? dim + ndim : dim;
  if (d < 0 || d >= ndim) {
    detail::fail<shape_error>(op, "dim", "a dimension in [-" + std::to_string(ndim) + ", " + std::to_string(ndim) + ")",
                              std::to_string(dim));
  }
  return static_cast<std::size_t>(d);
}

}  // namespace

std::int64_t TensorView::size(int dim) const { return shape_[checked_dim(dim, ndim(), "TensorView::size")]; }

std::int64_t TensorView::stride(int dim) const { return strides_[checked_dim(dim, ndim(), "TensorView::stride")]; }

std::int64_t TensorView::numel() const noexcept {
  if (!numel_is_nonzero()) return 0;
  std::int64_t n = 1;
  for (std::int64_t extent : shape_) n *= extent;  // fits: checked by the constructor
  return n;
}

bool TensorView::is_contiguous() const noexcept {
  std::int64_t expected = 1;
  for (std::size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 0) return true;
    if (shape_[i] != 1 && strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

}  // namespace sketchcore
