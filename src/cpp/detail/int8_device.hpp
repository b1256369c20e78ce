// The form of an Int8Factor that a device's int8 GEMM reads, and the per-device copies a factor
// keeps of it. Core code (no CUDA header): the CUDA backend uploads what int8_device_layout builds
// and stores it in the factor's DeviceCopies, once per device.
//
// Layout for cuBLASLt's int8 GEMM (CUBLAS_COMPUTE_32I, "TN": the first operand transposed): a k × n
// factor is stored column by column, column j's k values contiguous at j·k_pad, zero-padded to
// k_pad rows and n_pad columns, both multiples of 16 (the leading dimensions and extents the int8
// tensor-core kernels need; the padding is zeros on one side of every padded inner product, so the
// sums are the unpadded ones). The scales are padded with zeros to n_pad.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "sketchcore/int8_matmul.hpp"

namespace sketchcore::detail {

/// The multiple every extent and leading dimension of the device int8 GEMMs is padded to.
constexpr std::int64_t kInt8DeviceAlignment = 16;

/// `extent` padded to kInt8DeviceAlignment, at least one multiple (an empty extent still gives
/// the GEMM a valid shape; its padding is zeros).
constexpr std::int64_t int8_device_extent(std::int64_t extent) noexcept {
  const std::int64_t at_least_one = extent > 0 ? extent : 1;
  return (at_least_one + kInt8DeviceAlignment - 1) / kInt8DeviceAlignment * kInt8DeviceAlignment;
}

/// A factor in the device layout (above), in host memory.
struct Int8DeviceLayout {
  std::int64_t k_pad = 0, n_pad = 0;   ///< padded rows and columns
  std::vector<std::int8_t> values;      ///< n_pad · k_pad values, column j at j · k_pad
  std::vector<float> scales;            ///< n_pad column scales, zeros past cols
};

/// The device layout of `factor`.
Int8DeviceLayout int8_device_layout(const Int8Factor& factor);

/// Copies of one object on devices, one per device index, made on first use and kept until the
/// owner dies (the deleter of each frees its device memory). Thread-safe.
class DeviceCopies {
 public:
  /// The copy for `device`, made by `make()` (a std::shared_ptr<const void>) if there is none yet.
  template <class Make>
  std::shared_ptr<const void> get_or_make(int device, Make&& make) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& copy : copies_) {
      if (copy.first == device) return copy.second;
    }
    std::shared_ptr<const void> made = make();
    copies_.emplace_back(device, made);
    return made;
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<int, std::shared_ptr<const void>>> copies_;
};

/// The device copies of `factor` (held by its packing, freed with it).
DeviceCopies& int8_device_copies(const Int8Factor& factor) noexcept;

}  // namespace sketchcore::detail
