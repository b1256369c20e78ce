// Fp8Factor (include/sketchcore/fp8_matmul.hpp): checks the codes and scales, and stores them
// once in the layout of the device's fp8 GEMM (detail/fp8_device.hpp).
#include <cmath>
#include <optional>
#include <string>

#include "detail/check.hpp"
#include "detail/checked.hpp"
#include "detail/fp8_device.hpp"
#include "sketchcore/errors.hpp"

namespace sketchcore {

namespace {

constexpr const char* kOp = "Fp8Factor";

bool is_nan_code(std::uint8_t code) { return (code & 0x7F) == 0x7F; }

void check_inputs(const std::uint8_t* codes, std::int64_t rows, std::int64_t cols, std::int64_t row_stride,
                  std::int64_t col_stride, const float* scale) {
  if (rows < 0 || cols < 0) {
    detail::fail<shape_error>(kOp, "codes", "non-negative extents",
                              "shape (" + std::to_string(rows) + ", " + std::to_string(cols) + ")");
  }
  if ((rows > 0 && cols > 0 && codes == nullptr) || (cols > 0 && scale == nullptr)) {
    detail::fail<std::invalid_argument>(kOp, codes == nullptr ? "codes" : "scale", "data", "a null pointer");
  }
  for (std::int64_t j = 0; j < cols; ++j) {
    if (!std::isfinite(scale[j]) || scale[j] < 0.0f) {
      detail::fail<std::invalid_argument>(kOp, "scale", "finite non-negative values",
                                          std::to_string(scale[j]) + " at index " + std::to_string(j));
    }
  }
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < cols; ++j) {
      const std::uint8_t code = codes[i * row_stride + j * col_stride];
      if (is_nan_code(code)) {
        detail::fail<std::invalid_argument>(kOp, "codes", "finite e4m3 codes (not 0x7f or 0xff, the NaNs)",
                                            std::to_string(code) + " at index (" + std::to_string(i) + ", " +
                                                std::to_string(j) + ")");
      }
    }
  }
}

}  // namespace

Fp8Factor::Fp8Factor(const std::uint8_t* codes, std::int64_t rows, std::int64_t cols, std::int64_t row_stride,
                     std::int64_t col_stride, const float* scale)
    : storage_(std::make_unique<Storage>()) {
  check_inputs(codes, rows, cols, row_stride, col_stride, scale);
  Storage& s = *storage_;
  s.rows = rows;
  s.cols = cols;
  s.k_pad = detail::int8_device_extent(rows);  // the same multiples of 16 as the int8 GEMM's
  s.n_pad = detail::int8_device_extent(cols);
  const std::optional<std::int64_t> count = detail::checked_mul(s.k_pad, s.n_pad);
  if (!count || *count > (std::int64_t{1} << 46)) {
    detail::fail<shape_error>(kOp, "codes", "a storable size",
                              "shape (" + std::to_string(rows) + ", " + std::to_string(cols) + ")");
  }
  s.codes.assign(static_cast<std::size_t>(*count), 0);
  s.scales.assign(static_cast<std::size_t>(s.n_pad), 0.0f);
  for (std::int64_t j = 0; j < cols; ++j) {
    std::uint8_t* column = s.codes.data() + j * s.k_pad;
    for (std::int64_t i = 0; i < rows; ++i) column[i] = codes[i * row_stride + j * col_stride];
    s.scales[static_cast<std::size_t>(j)] = scale[j];
  }
}

Fp8Factor::~Fp8Factor() = default;
Fp8Factor::Fp8Factor(Fp8Factor&&) noexcept = default;
Fp8Factor& Fp8Factor::operator=(Fp8Factor&&) noexcept = default;

bool Fp8Factor::valid() const noexcept { return storage_ != nullptr; }
std::int64_t Fp8Factor::rows() const noexcept { return storage_ ? storage_->rows : 0; }
std::int64_t Fp8Factor::cols() const noexcept { return storage_ ? storage_->cols : 0; }
std::int64_t Fp8Factor::nbytes() const noexcept {
  return storage_ ? static_cast<std::int64_t>(storage_->codes.size() + storage_->scales.size() * sizeof(float)) : 0;
}
const float* Fp8Factor::scales() const noexcept { return storage_ ? storage_->scales.data() : nullptr; }
const Fp8Factor::Storage& Fp8Factor::storage() const noexcept { return *storage_; }

void Fp8Factor::unpack(std::uint8_t* codes) const noexcept {
  if (!storage_) return;  // moved from: no values
  const Storage& s = *storage_;
  for (std::int64_t i = 0; i < s.rows; ++i) {
    for (std::int64_t j = 0; j < s.cols; ++j) codes[i * s.cols + j] = s.codes[static_cast<std::size_t>(j * s.k_pad + i)];
  }
}

}  // namespace sketchcore
