// Stream-ordered device memory for the CUDA backend's temporaries: by default one
// cudaMemPool per device whose release threshold is unlimited, so freed memory stays in the
// pool and the steady state makes no cudaMalloc; allocation and release are ordered on the
// caller's stream (cudaMallocFromPoolAsync / cudaFreeAsync). An application may route them
// to its own DeviceMemoryResource (set_device_memory_resource) instead.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "sketchcore/memory.hpp"

namespace sketchcore::cuda {

/// `bytes` of device `device`, usable in stream order on `stream`, from `resource` (an
/// application's DeviceMemoryResource) or, when null, from sketchcore's pool. Counted in
/// the device's statistics either way.
/// @throws out_of_memory when there is no memory left, cuda_error on other failures
void* pool_allocate(int device, std::size_t bytes, cudaStream_t stream, DeviceMemoryResource* resource);

/// Returns a block of pool_allocate(device, bytes, stream, resource) in stream order.
void pool_deallocate(int device, void* block, std::size_t bytes, cudaStream_t stream,
                     DeviceMemoryResource* resource) noexcept;

/// Counters of device `device`'s pool.
MemoryStats pool_stats(int device);
/// Sets the pool's peak to its current bytes.
void pool_reset_peak(int device);
/// Synchronises the device and trims the pool to what is in use.
void pool_empty_cache(int device);

/// A temporary from the current device memory resource (sketchcore's pool by default),
/// returned to that same resource in stream order when the object dies (also when an
/// exception unwinds), so a failing call leaks nothing.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(int device, std::size_t bytes, cudaStream_t stream)
      : device_(device), bytes_(bytes), stream_(stream), resource_(device_memory_resource()),
        data_(pool_allocate(device, bytes, stream, resource_)) {}
  ~DeviceBuffer() { release(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = static_cast<DeviceBuffer&&>(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      release();
      device_ = other.device_;
      bytes_ = other.bytes_;
      stream_ = other.stream_;
      resource_ = other.resource_;
      data_ = other.data_;
      other.data_ = nullptr;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  /// The block as an array of T.
  template <class T>
  T* as() const noexcept {
    return static_cast<T*>(data_);
  }

 private:
  void release() noexcept {
    if (data_) pool_deallocate(device_, data_, bytes_, stream_, resource_);
    data_ = nullptr;
  }

  int device_ = 0;
  std::size_t bytes_ = 0;
  cudaStream_t stream_ = nullptr;
  DeviceMemoryResource* resource_ = nullptr;
  void* data_ = nullptr;
};

}  // namespace sketchcore::cuda
