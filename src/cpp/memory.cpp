#include "sketchcore/memory.hpp"

#include "detail/backend.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sketchcore {

out_of_memory::out_of_memory(std::string message) : message_(std::move(message)) {}
const char* out_of_memory::what() const noexcept { return message_.c_str(); }

MemoryResource::~MemoryResource() = default;

struct CachingHostPool::State {
  mutable std::mutex mutex;
  std::unordered_map<std::size_t, std::vector<void*>> free_blocks;  // size class -> blocks
  MemoryStats stats;
  std::size_t cached_bytes = 0;

  void release_cache() noexcept {
    for (auto& [size, blocks] : free_blocks) {
      for (void* b : blocks) std::free(b);
      stats.reserved_bytes -= size * blocks.size();
    }
    free_blocks.clear();
    cached_bytes = 0;
  }
};

CachingHostPool::CachingHostPool() : state_(new State) {}

CachingHostPool::~CachingHostPool() {
  state_->release_cache();
  delete state_;
}

namespace {
/// The largest request the pool serves: 2**62 bytes (far beyond any machine's memory; the
/// bound keeps the size-class arithmetic and the statistics free of overflow).
constexpr std::size_t kLargest = std::size_t{1} << 62;
}  // namespace

std::size_t CachingHostPool::size_class(std::size_t bytes) noexcept {
  constexpr std::size_t kSmallest = 512;
  if (bytes <= kSmallest) return kSmallest;
  // Four classes per power of two: 2^e · {1, 1.25, 1.5, 1.75}; at most 25% rounding.
  // Above kLargest rounding could overflow; such a request can never be served anyway, and
  // allocate() refuses it before asking for a class.
  if (bytes > kLargest) return bytes;
  std::size_t power = kSmallest;
  while (power < bytes - power) power *= 2;  // power * 2 < bytes, without overflow
  const std::size_t step = power / 4;
  return (bytes + step - 1) / step * step;
}

void* CachingHostPool::allocate(std::size_t bytes) {
  if (bytes > kLargest) {
    throw out_of_memory("sketchcore host memory pool: a request of " + std::to_string(bytes) +
                        " bytes exceeds the largest block the pool hands out (" + std::to_string(kLargest) + " bytes)");
  }
  const std::size_t size = size_class(bytes);
  std::lock_guard<std::mutex> lock(state_->mutex);
  MemoryStats& s = state_->stats;
  void* block = nullptr;
  auto it = state_->free_blocks.find(size);
  if (it != state_->free_blocks.end() && !it->second.empty()) {
    block = it->second.back();
    it->second.pop_back();
    state_->cached_bytes -= size;
    ++s.num_cache_hits;
  } else {
    if (s.limit_bytes != 0 && s.reserved_bytes + size > s.limit_bytes) state_->release_cache();
    if (s.limit_bytes != 0 && s.reserved_bytes + size > s.limit_bytes) {
      throw out_of_memory("sketchcore host memory pool: allocating " + std::to_string(size) +
                          " bytes would exceed the limit of " + std::to_string(s.limit_bytes) + " bytes (" +
                          std::to_string(s.current_bytes) + " bytes in use)");
    }
    block = std::aligned_alloc(64, size);
    if (block == nullptr) {
      state_->release_cache();
      block = std::aligned_alloc(64, size);
    }
    if (block == nullptr) {
      throw out_of_memory("sketchcore host memory pool: the system could not provide " + std::to_string(size) +
                          " bytes");
    }
    s.reserved_bytes += size;
  }
  ++s.num_allocs;
  s.current_bytes += size;
  s.peak_bytes = std::max(s.peak_bytes, s.current_bytes);
  return block;
}

void CachingHostPool::deallocate(void* block, std::size_t bytes) noexcept {
  if (block == nullptr) return;
  const std::size_t size = size_class(bytes);
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->stats.current_bytes -= size;
  try {
    state_->free_blocks[size].push_back(block);
    state_->cached_bytes += size;
  } catch (...) {  // no room to remember the block: give it back instead
    std::free(block);
    state_->stats.reserved_bytes -= size;
  }
}

MemoryStats CachingHostPool::stats() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->stats;
}

void CachingHostPool::reset_peak() noexcept {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->stats.peak_bytes = state_->stats.current_bytes;
}

void CachingHostPool::empty_cache() noexcept {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->release_cache();
}

void CachingHostPool::set_limit(std::optional<std::size_t> limit) noexcept {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->stats.limit_bytes = limit.value_or(0);
}

CachingHostPool& default_host_pool() {
  // Never destroyed: blocks may still be returned while other statics are torn down.
  static CachingHostPool* pool = new CachingHostPool();
  return *pool;
}

namespace {
std::atomic<MemoryResource*> g_host_resource{nullptr};
}

MemoryResource& host_memory_resource() noexcept {
  MemoryResource* r = g_host_resource.load(std::memory_order_acquire);
  return r ? *r : default_host_pool();
}

void set_host_memory_resource(MemoryResource* resource) noexcept {
  g_host_resource.store(resource, std::memory_order_release);
}

DeviceMemoryResource::~DeviceMemoryResource() = default;

namespace {
std::atomic<DeviceMemoryResource*> g_device_resource{nullptr};
}

void set_device_memory_resource(DeviceMemoryResource* resource) noexcept {
  g_device_resource.store(resource, std::memory_order_release);
}

DeviceMemoryResource* device_memory_resource() noexcept { return g_device_resource.load(std::memory_order_acquire); }

namespace {
void check_device_ordinal(int device) {
  if (device < 0) {
    throw std::invalid_argument("sketchcore: device: expected a CUDA device ordinal ≥ 0, got " + std::to_string(device));
  }
}
}  // namespace

// Without the CUDA backend no device has temporaries: zeros, and nothing to reset or free.
MemoryStats device_memory_stats(int device) {
  check_device_ordinal(device);
  const detail::Backend* cuda = detail::cuda_backend();
  return cuda ? cuda->memory_stats(device) : MemoryStats{};
}

void device_reset_peak(int device) {
  check_device_ordinal(device);
  if (const detail::Backend* cuda = detail::cuda_backend()) cuda->reset_peak(device);
}

void device_empty_cache(int device) {
  check_device_ordinal(device);
  if (const detail::Backend* cuda = detail::cuda_backend()) cuda->empty_cache(device);
}

}  // namespace sketchcore
