// Overflow-checked extent arithmetic. Extents reach the core from any DLPack producer, and
// stride-0 views (torch's expand) describe astronomically large arrays in a few bytes, so
// every product of extents that sizes a loop, a temporary or an offset is formed here
// first: an overflow becomes an exception naming the argument, before anything is
// allocated or written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "detail/check.hpp"
#include "sketchcore/errors.hpp"
#include "sketchcore/tensor.hpp"

namespace sketchcore::detail {

/// a · b for non-negative a and b, or nullopt when the product exceeds INT64_MAX.
inline std::optional<std::int64_t> checked_mul(std::int64_t a, std::int64_t b) noexcept {
  std::int64_t product;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

/// The largest byte count any array, temporary or offset may have: one that fits a signed
/// 64-bit integer (and therefore ptrdiff_t and size_t).
constexpr std::int64_t kMaxBytes = std::numeric_limits<std::int64_t>::max();

/// Throws shape_error unless `count` elements of `dtype` (an array or a temporary the call
/// would form) fit in kMaxBytes. `describe()` returns the description of the count for the
/// message; it runs only on failure (these checks run on every call, and building the text
/// each time was measured at a tenth of a tiny call's host time).
template <class Describe>
inline void check_addressable_lazy(std::string_view op, std::string_view argument, std::optional<std::int64_t> count,
                                   DType dtype, const Describe& describe) {
  const std::optional<std::int64_t> bytes =
      count ? checked_mul(*count, static_cast<std::int64_t>(dtype_size(dtype))) : std::nullopt;
  if (!bytes) {
    fail<shape_error>(op, argument, "at most 2**63 - 1 bytes of " + std::string(dtype_name(dtype)) + " elements",
                      std::string(describe()));
  }
}

/// check_addressable_lazy with a fixed description.
inline void check_addressable(std::string_view op, std::string_view argument, std::optional<std::int64_t> count,
                              DType dtype, std::string_view what) {
  check_addressable_lazy(op, argument, count, dtype, [what] { return what; });
}

/// Throws shape_error unless all the elements of `view` (counted as if it were compact)
/// fit in kMaxBytes; stride-0 views may describe more elements than memory holds.
inline void check_addressable(std::string_view op, std::string_view argument, const TensorView& view) {
  check_addressable_lazy(op, argument, view.numel(), view.dtype(), [&view] { return describe_shape(view); });
}

/// rows × cols elements of `dtype` (a temporary or derived array), checked like an argument.
inline std::int64_t checked_elements(std::string_view op, std::string_view argument, std::int64_t rows,
                                     std::int64_t cols, DType dtype, std::string_view what) {
  const std::optional<std::int64_t> count = checked_mul(rows, cols);
  check_addressable_lazy(op, argument, count, dtype, [&] {
    return std::string(what) + " of " + std::to_string(rows) + " × " + std::to_string(cols) + " elements";
  });
  return *count;
}

}  // namespace sketchcore::detail
