#include "device_pool.cuh"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>

#include "cuda_common.cuh"
#include "sketchcore/errors.hpp"

namespace sketchcore::cuda {

namespace {

constexpr int kMaxDevices = 64;

struct DevicePool {
  std::once_flag created;
  cudaMemPool_t pool = nullptr;
  std::atomic<bool> ready{false};  // the pool exists
  std::atomic<bool> used{false};   // a temporary was allocated on the device (any resource)
  std::atomic<std::size_t> current{0}, peak{0}, allocs{0};
};

std::array<DevicePool, kMaxDevices>& pools() {
  static std::array<DevicePool, kMaxDevices> all;
  return all;
}

DevicePool& state_of(int device) {
  if (device < 0 || device >= kMaxDevices) {
    throw std::invalid_argument("sketchcore: device: expected a CUDA device ordinal in [0, " +
                                std::to_string(kMaxDevices) + "), got " + std::to_string(device));
  }
  return pools()[static_cast<std::size_t>(device)];
}

/// The device's state with its pool created.
DevicePool& pool_of(int device) {
  DevicePool& p = state_of(device);
  std::call_once(p.created, [&] {
    const RelaxedCaptureMode setup_may_be_captured;
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    check(cudaMemPoolCreate(&p.pool, &props), "cudaMemPoolCreate");
    // Keep freed memory in the pool instead of returning it at each synchronisation.
    std::uint64_t threshold = std::numeric_limits<std::uint64_t>::max();
    check(cudaMemPoolSetAttribute(p.pool, cudaMemPoolAttrReleaseThreshold, &threshold),
          "cudaMemPoolSetAttribute(release threshold)");
    p.ready.store(true);
  });
  return p;
}

void* from_pool(int device, std::size_t bytes, cudaStream_t stream) {
  DevicePool& p = pool_of(device);
  void* block = nullptr;
  const cudaError_t status = cudaMallocFromPoolAsync(&block, bytes, p.pool, stream);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear the sticky-free error state
    throw out_of_memory("sketchcore: CUDA device " + std::to_string(device) + " has no memory left for a " +
                        std::to_string(bytes) + "-byte temporary");
  }
  check(status, "cudaMallocFromPoolAsync");
  return block;
}

void* from_resource(DeviceMemoryResource& resource, int device, std::size_t bytes, cudaStream_t stream) {
  void* block = resource.allocate(bytes, device, stream);
  if (!block) {
    throw out_of_memory("sketchcore: the device memory resource returned no memory for a " + std::to_string(bytes) +
                        "-byte temporary on CUDA device " + std::to_string(device));
  }
  return block;
}

}  // namespace

void* pool_allocate(int device, std::size_t bytes, cudaStream_t stream, DeviceMemoryResource* resource) {
  if (bytes == 0) return nullptr;
  DevicePool& p = state_of(device);
  void* block = resource ? from_resource(*resource, device, bytes, stream) : from_pool(device, bytes, stream);
  const std::size_t now = p.current.fetch_add(bytes) + bytes;
  std::size_t seen = p.peak.load();
  while (now > seen && !p.peak.compare_exchange_weak(seen, now)) {
  }
  p.allocs.fetch_add(1);
  p.used.store(true);
  return block;
}

void pool_deallocate(int device, void* block, std::size_t bytes, cudaStream_t stream,
                     DeviceMemoryResource* resource) noexcept {
  if (!block) return;
  if (resource) {
    resource->deallocate(block, bytes, device, stream);
  } else {
    cudaFreeAsync(block, stream);
  }
  pools()[static_cast<std::size_t>(device)].current.fetch_sub(bytes);
}

MemoryStats pool_stats(int device) {
  DevicePool& p = state_of(device);  // statistics never create a pool
  if (!p.used.load() && !p.ready.load()) return {};
  MemoryStats s;
  s.current_bytes = p.current.load();
  s.peak_bytes = p.peak.load();
  s.num_allocs = p.allocs.load();
  if (p.ready.load()) {
    std::uint64_t reserved = 0;
    check(cudaMemPoolGetAttribute(p.pool, cudaMemPoolAttrReservedMemCurrent, &reserved),
          "cudaMemPoolGetAttribute(reserved)");
    s.reserved_bytes = static_cast<std::size_t>(reserved);
  }
  return s;
}

void pool_reset_peak(int device) {
  DevicePool& p = state_of(device);
  p.peak.store(p.current.load());
}

void pool_empty_cache(int device) {
  DevicePool& p = state_of(device);
  if (!p.ready.load()) return;
  DeviceGuard guard(device);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  check(cudaMemPoolTrimTo(p.pool, 0), "cudaMemPoolTrimTo");
}

}  // namespace sketchcore::cuda
