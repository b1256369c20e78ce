// The CPU backend's layout of int8 factors (cpu/int8_gemm.hpp): the panels and column sums made
// from the stored codes (detail/quantized_storage.hpp) once, kept by the factor as its host copy;
// and Int8Factor's constructor, which packs at once (so nbytes counts the packing from the start).
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <string>

#include "cpu/int8_gemm.hpp"
#include "detail/check.hpp"
#include "detail/checked.hpp"
#include "sketchcore/errors.hpp"

namespace sketchcore {

Int8Factor::Packed::~Packed() {
  if (storage) ::operator delete(storage, std::align_val_t{64});
}

namespace detail {

namespace {

std::int64_t round_up(std::int64_t value, std::int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

}  // namespace

std::shared_ptr<const Int8Factor::Packed> pack_int8_factor(const QuantizedFactor::Storage& s) {
  auto made = std::make_shared<Int8Factor::Packed>();
  Int8Factor::Packed& p = *made;
  p.rows = s.rows;
  p.cols = s.cols;
  p.groups = (s.rows + 3) / 4;
  p.panels = (s.cols + kInt8PanelCols - 1) / kInt8PanelCols;
  const std::int64_t padded_cols = p.panels * kInt8PanelCols;
  const std::optional<std::int64_t> panel_groups = checked_mul(p.panels, p.groups);
  const std::optional<std::int64_t> packed_bytes = panel_groups ? checked_mul(*panel_groups, kInt8GroupBytes) : std::nullopt;
  if (!packed_bytes || *packed_bytes > (std::int64_t{1} << 46)) {
    fail<shape_error>("Int8Factor", "q", "a packable size",
                      "shape (" + std::to_string(s.rows) + ", " + std::to_string(s.cols) + ")");
  }
  const std::int64_t value_bytes = *packed_bytes;
  const std::int64_t scale_bytes = round_up(padded_cols * 4, 64);
  p.storage_bytes = value_bytes + 2 * scale_bytes;
  p.storage = ::operator new(static_cast<std::size_t>(p.storage_bytes > 0 ? p.storage_bytes : 64), std::align_val_t{64});
  auto* base = static_cast<std::int8_t*>(p.storage);
  std::memset(base, 0, static_cast<std::size_t>(p.storage_bytes));
  p.values = base;
  p.scales = reinterpret_cast<float*>(base + value_bytes);
  p.column_offsets = reinterpret_cast<std::int32_t*>(base + value_bytes + scale_bytes);
  for (std::int64_t j = 0; j < s.cols; ++j) {
    std::int8_t* panel = p.values + (j / kInt8PanelCols) * p.groups * kInt8GroupBytes;
    const std::int64_t lane = j % kInt8PanelCols;
    const auto* column = reinterpret_cast<const std::int8_t*>(s.codes.data() + j * s.k_pad);
    std::int32_t sum = 0;
    for (std::int64_t i = 0; i < s.rows; ++i) {
      panel[(i / 4) * kInt8GroupBytes + 4 * lane + i % 4] = column[i];
      sum += column[i];
    }
    p.scales[j] = s.scales[static_cast<std::size_t>(j)];
    p.column_offsets[j] = 128 * sum;
  }
  return made;
}

const Int8Factor::Packed& int8_packing(const QuantizedFactor& factor) {
  const QuantizedFactor::Storage& s = factor.storage();
  const std::shared_ptr<const void> copy = s.copies.get_or_make(kHostCopy, [&] { return pack_int8_factor(s); });
  return *static_cast<const Int8Factor::Packed*>(copy.get());  // kept alive by s.copies
}

}  // namespace detail

Int8Factor::Int8Factor(const std::int8_t* q, std::int64_t rows, std::int64_t cols, std::int64_t row_stride,
                       std::int64_t col_stride, const float* scale)
    : QuantizedFactor(QuantFormat::int8, reinterpret_cast<const std::uint8_t*>(q), rows, cols, row_stride, col_stride,
                      scale) {
  // Packed now: the first product does not pay for it, and nbytes counts it from the start.
  auto& s = const_cast<QuantizedFactor::Storage&>(storage());
  s.host_copy_bytes = detail::int8_packing(*this).storage_bytes;
}

void Int8Factor::unpack(std::int8_t* q) const noexcept { unpack_codes(reinterpret_cast<std::uint8_t*>(q)); }

const Int8Factor::Packed& Int8Factor::packed() const { return detail::int8_packing(*this); }

}  // namespace sketchcore
