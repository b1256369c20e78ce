// The table of quantized formats and QuantizedFactor (include/sketchcore/quantized.hpp): checks the
// codes and scales by the format's rules and stores them once in the shared column layout
// (detail/quantized_storage.hpp); Int8Factor adds the CPU's packing (cpu/int8_pack.cpp).
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>

#include "detail/check.hpp"
#include "detail/checked.hpp"
#include "detail/quantized_storage.hpp"
#include "sketchcore/errors.hpp"
#include "sketchcore/fp8_matmul.hpp"
#include "sketchcore/int8_matmul.hpp"
#include "sketchcore/quantized.hpp"

namespace sketchcore {

namespace {

/// One row per format; a new format is a row here plus its backends' kernels.
constexpr QuantFormatInfo kFormats[] = {
    {QuantFormat::int8, "int8", "Int8Factor", "q", "values in [-127, 127] (symmetric quantization)", 1, true,
     127.0f, 65536, true, "int8_sketched_matmul", "int8_matmul", nullptr},
    {QuantFormat::fp8_e4m3, "fp8_e4m3", "Fp8Factor", "codes", "finite e4m3 codes (not 0x7f or 0xff, the NaNs)", 1,
     false, 448.0f, std::int64_t{1} << 46, false, "fp8_sketched_matmul", "fp8_matmul",
     "an array on a CUDA device of compute capability 8.9 or newer (there is no CPU fp8 kernel)"},
};

std::string shape_text(std::int64_t rows, std::int64_t cols) {
  return "shape (" + std::to_string(rows) + ", " + std::to_string(cols) + ")";
}

void check_inputs(const QuantFormatInfo& f, const std::uint8_t* codes, std::int64_t rows, std::int64_t cols,
                  std::int64_t row_stride, std::int64_t col_stride, const float* scale) {
  if (rows < 0 || cols < 0) detail::fail<shape_error>(f.factor_type, f.codes_argument, "non-negative extents", shape_text(rows, cols));
  if (rows > f.max_rows) {
    detail::fail<shape_error>(f.factor_type, f.codes_argument,
                              "at most " + std::to_string(f.max_rows) + " rows (the sums must stay exact)",
                              std::to_string(rows) + " rows");
  }
  if ((rows > 0 && cols > 0 && codes == nullptr) || (cols > 0 && scale == nullptr)) {
    detail::fail<std::invalid_argument>(f.factor_type, codes == nullptr ? f.codes_argument : "scale", "data",
                                        "a null pointer");
  }
  for (std::int64_t j = 0; j < cols; ++j) {
    if (!std::isfinite(scale[j]) || scale[j] < 0.0f) {
      detail::fail<std::invalid_argument>(f.factor_type, "scale", "finite non-negative values",
                                          std::to_string(scale[j]) + " at index " + std::to_string(j));
    }
  }
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < cols; ++j) {
      const std::uint8_t code = codes[i * row_stride + j * col_stride];
      if (!quant_code_valid(f.format, code)) {
        const int shown = f.signed_codes ? static_cast<int>(static_cast<std::int8_t>(code)) : static_cast<int>(code);
        detail::fail<std::invalid_argument>(f.factor_type, f.codes_argument, f.code_rule,
                                            std::to_string(shown) + " at index (" + std::to_string(i) + ", " +
                                                std::to_string(j) + ")");
      }
    }
  }
}

}  // namespace

const QuantFormatInfo& quant_format_info(QuantFormat format) {
  for (const QuantFormatInfo& info : kFormats) {
    if (info.format == format) return info;
  }
  detail::fail<std::invalid_argument>("quant_format_info", "format", "a QuantFormat enumerator",
                                      "the value " + std::to_string(static_cast<int>(format)));
}

std::vector<QuantFormat> quant_formats() {
  std::vector<QuantFormat> formats;
  for (const QuantFormatInfo& info : kFormats) formats.push_back(info.format);
  return formats;
}

bool quant_code_valid(QuantFormat format, std::uint8_t code) noexcept {
  switch (format) {
    case QuantFormat::int8: return code != 0x80;                    // −128: the range is symmetric
    case QuantFormat::fp8_e4m3: return (code & 0x7F) != 0x7F;        // 0x7F and 0xFF are the NaNs
  }
  return false;
}

QuantizedFactor::QuantizedFactor(QuantFormat format, const std::uint8_t* codes, std::int64_t rows, std::int64_t cols,
                                 std::int64_t row_stride, std::int64_t col_stride, const float* scale)
    : format_(format), storage_(std::make_unique<Storage>()) {
  const QuantFormatInfo& f = quant_format_info(format);
  check_inputs(f, codes, rows, cols, row_stride, col_stride, scale);
  Storage& s = *storage_;
  s.rows = rows;
  s.cols = cols;
  s.k_pad = detail::quantized_extent(rows);
  s.n_pad = detail::quantized_extent(cols);
  const std::optional<std::int64_t> count = detail::checked_mul(s.k_pad, s.n_pad);
  if (!count || *count > (std::int64_t{1} << 46)) {
    detail::fail<shape_error>(f.factor_type, f.codes_argument, "a storable size", shape_text(rows, cols));
  }
  s.codes.assign(static_cast<std::size_t>(*count), 0);
  s.scales.assign(static_cast<std::size_t>(s.n_pad), 0.0f);
  for (std::int64_t j = 0; j < cols; ++j) {
    std::uint8_t* column = s.codes.data() + j * s.k_pad;
    for (std::int64_t i = 0; i < rows; ++i) column[i] = codes[i * row_stride + j * col_stride];
    s.scales[static_cast<std::size_t>(j)] = scale[j];
  }
}

std::unique_ptr<QuantizedFactor> make_quantized_factor(QuantFormat format, const std::uint8_t* codes, std::int64_t rows,
                                                       std::int64_t cols, std::int64_t row_stride,
                                                       std::int64_t col_stride, const float* scale) {
  switch (format) {
    case QuantFormat::int8:
      return std::make_unique<Int8Factor>(reinterpret_cast<const std::int8_t*>(codes), rows, cols, row_stride,
                                          col_stride, scale);
    case QuantFormat::fp8_e4m3: return std::make_unique<Fp8Factor>(codes, rows, cols, row_stride, col_stride, scale);
  }
  (void)quant_format_info(format);  // throws, naming the unknown value
  return nullptr;
}

QuantizedFactor::~QuantizedFactor() = default;
QuantizedFactor::QuantizedFactor(QuantizedFactor&&) noexcept = default;
QuantizedFactor& QuantizedFactor::operator=(QuantizedFactor&&) noexcept = default;

bool QuantizedFactor::valid() const noexcept { return storage_ != nullptr; }
std::int64_t QuantizedFactor::rows() const noexcept { return storage_ ? storage_->rows : 0; }
std::int64_t QuantizedFactor::cols() const noexcept { return storage_ ? storage_->cols : 0; }
std::int64_t QuantizedFactor::nbytes() const noexcept {
  if (!storage_) return 0;
  return static_cast<std::int64_t>(storage_->codes.size() + storage_->scales.size() * sizeof(float)) +
         storage_->host_copy_bytes;
}
const float* QuantizedFactor::scales() const noexcept { return storage_ ? storage_->scales.data() : nullptr; }
const QuantizedFactor::Storage& QuantizedFactor::storage() const noexcept { return *storage_; }

void QuantizedFactor::unpack_codes(std::uint8_t* codes) const noexcept {
  if (!storage_) return;  // moved from: no values
  const Storage& s = *storage_;
  for (std::int64_t i = 0; i < s.rows; ++i) {
    for (std::int64_t j = 0; j < s.cols; ++j) codes[i * s.cols + j] = s.codes[static_cast<std::size_t>(j * s.k_pad + i)];
  }
}

}  // namespace sketchcore
