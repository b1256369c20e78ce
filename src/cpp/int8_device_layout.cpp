// The device layout of an Int8Factor (detail/int8_device.hpp): columns contiguous, padded to
// multiples of 16, built from the factor's public accessors on the host; and the factor's device copies.
#include <cstddef>
#include <vector>

#include "cpu/int8_gemm.hpp"
#include "detail/int8_device.hpp"

namespace sketchcore::detail {

Int8DeviceLayout int8_device_layout(const Int8Factor& factor) {
  const std::int64_t rows = factor.rows(), cols = factor.cols();
  Int8DeviceLayout layout;
  layout.k_pad = int8_device_extent(rows);
  layout.n_pad = int8_device_extent(cols);
  layout.values.assign(static_cast<std::size_t>(layout.k_pad * layout.n_pad), 0);
  layout.scales.assign(static_cast<std::size_t>(layout.n_pad), 0.0f);
  std::vector<std::int8_t> row_major(static_cast<std::size_t>(rows * cols));
  if (!row_major.empty()) factor.unpack(row_major.data());
  for (std::int64_t j = 0; j < cols; ++j) {
    std::int8_t* column = layout.values.data() + j * layout.k_pad;
    for (std::int64_t i = 0; i < rows; ++i) column[i] = row_major[static_cast<std::size_t>(i * cols + j)];
    layout.scales[static_cast<std::size_t>(j)] = factor.scales()[j];
  }
  return layout;
}

DeviceCopies& int8_device_copies(const Int8Factor& factor) noexcept { return factor.packed().device_copies; }

}  // namespace sketchcore::detail
