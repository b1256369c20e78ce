// Int8Factor (include/sketchcore/int8_matmul.hpp): checks the values and scales, and packs them
// once into the layout of the CPU int8 kernels (cpu/int8_gemm.hpp) in one 64-byte-aligned block.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <string>

#include "cpu/int8_gemm.hpp"
#include "detail/check.hpp"
#include "detail/checked.hpp"
#include "sketchcore/errors.hpp"
#include "sketchcore/int8_matmul.hpp"

namespace sketchcore {

namespace {

constexpr const char* kOp = "Int8Factor";

std::int64_t round_up(std::int64_t value, std::int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

void check_inputs(const std::int8_t* q, std::int64_t rows, std::int64_t cols, std::int64_t row_stride,
                  std::int64_t col_stride, const float* scale) {
  if (rows < 0 || cols < 0) {
    detail::fail<shape_error>(kOp, "q", "non-negative extents",
                              "shape (" + std::to_string(rows) + ", " + std::to_string(cols) + ")");
  }
  if (rows > detail::kInt8MaxInner) {
    detail::fail<shape_error>(kOp, "q", "at most " + std::to_string(detail::kInt8MaxInner) +
                                            " rows (the int32 sums must not overflow)",
                              std::to_string(rows) + " rows");
  }
  if ((rows > 0 && cols > 0 && q == nullptr) || (cols > 0 && scale == nullptr)) {
    detail::fail<std::invalid_argument>(kOp, q == nullptr ? "q" : "scale", "data", "a null pointer");
  }
  for (std::int64_t j = 0; j < cols; ++j) {
    if (!std::isfinite(scale[j]) || scale[j] < 0.0f) {
      detail::fail<std::invalid_argument>(kOp, "scale", "finite non-negative values",
                                          std::to_string(scale[j]) + " at index " + std::to_string(j));
    }
  }
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < cols; ++j) {
      if (q[i * row_stride + j * col_stride] == -128) {
        detail::fail<std::invalid_argument>(kOp, "q", "values in [-127, 127] (symmetric quantization)",
                                            "-128 at index (" + std::to_string(i) + ", " + std::to_string(j) + ")");
      }
    }
  }
}

}  // namespace

Int8Factor::Int8Factor(const std::int8_t* q, std::int64_t rows, std::int64_t cols, std::int64_t row_stride,
                       std::int64_t col_stride, const float* scale)
    : packed_(std::make_unique<Packed>()) {
  check_inputs(q, rows, cols, row_stride, col_stride, scale);
  Packed& p = *packed_;
  p.rows = rows;
  p.cols = cols;
  p.groups = (rows + 3) / 4;
  p.panels = (cols + detail::kInt8PanelCols - 1) / detail::kInt8PanelCols;
  const std::int64_t padded_cols = p.panels * detail::kInt8PanelCols;
  const std::optional<std::int64_t> panel_groups = detail::checked_mul(p.panels, p.groups);
  const std::optional<std::int64_t> packed_bytes =
      panel_groups ? detail::checked_mul(*panel_groups, detail::kInt8GroupBytes) : std::nullopt;
  if (!packed_bytes || *packed_bytes > (std::int64_t{1} << 46)) {
    detail::fail<shape_error>(kOp, "q", "a packable size", "shape (" + std::to_string(rows) + ", " +
                                                                std::to_string(cols) + ")");
  }
  const std::int64_t value_bytes = *packed_bytes;
  const std::int64_t scale_bytes = round_up(padded_cols * 4, 64);
  p.storage_bytes = value_bytes + 2 * scale_bytes;
  p.storage = ::operator new(static_cast<std::size_t>(p.storage_bytes > 0 ? p.storage_bytes : 64),
                             std::align_val_t{64});
  auto* base = static_cast<std::int8_t*>(p.storage);
  std::memset(base, 0, static_cast<std::size_t>(p.storage_bytes));
  p.values = base;
  p.scales = reinterpret_cast<float*>(base + value_bytes);
  p.column_offsets = reinterpret_cast<std::int32_t*>(base + value_bytes + scale_bytes);
  for (std::int64_t j = 0; j < cols; ++j) {
    std::int8_t* panel = p.values + (j / detail::kInt8PanelCols) * p.groups * detail::kInt8GroupBytes;
    const std::int64_t lane = j % detail::kInt8PanelCols;
    std::int32_t sum = 0;
    for (std::int64_t i = 0; i < rows; ++i) {
      const std::int8_t value = q[i * row_stride + j * col_stride];
      panel[(i / 4) * detail::kInt8GroupBytes + 4 * lane + i % 4] = value;
      sum += value;
    }
    p.scales[j] = scale[j];
    p.column_offsets[j] = 128 * sum;
  }
}

Int8Factor::~Int8Factor() {
  if (packed_ && packed_->storage) ::operator delete(packed_->storage, std::align_val_t{64});
}

Int8Factor::Int8Factor(Int8Factor&&) noexcept = default;

Int8Factor& Int8Factor::operator=(Int8Factor&& other) noexcept {
  if (this != &other) {
    if (packed_ && packed_->storage) ::operator delete(packed_->storage, std::align_val_t{64});
    packed_ = std::move(other.packed_);
  }
  return *this;
}

bool Int8Factor::valid() const noexcept { return packed_ != nullptr; }
std::int64_t Int8Factor::rows() const noexcept { return packed_ ? packed_->rows : 0; }
std::int64_t Int8Factor::cols() const noexcept { return packed_ ? packed_->cols : 0; }
std::int64_t Int8Factor::nbytes() const noexcept { return packed_ ? packed_->storage_bytes : 0; }
const float* Int8Factor::scales() const noexcept { return packed_ ? packed_->scales : nullptr; }
const Int8Factor::Packed& Int8Factor::packed() const noexcept { return *packed_; }

void Int8Factor::unpack(std::int8_t* q) const noexcept {
  if (!packed_) return;  // moved from: no values
  const Packed& p = *packed_;
  for (std::int64_t i = 0; i < p.rows; ++i) {
    for (std::int64_t j = 0; j < p.cols; ++j) {
      const std::int8_t* panel = p.values + (j / detail::kInt8PanelCols) * p.groups * detail::kInt8GroupBytes;
      q[i * p.cols + j] = panel[(i / 4) * detail::kInt8GroupBytes + 4 * (j % detail::kInt8PanelCols) + i % 4];
    }
  }
}

}  // namespace sketchcore
