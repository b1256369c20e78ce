/// @file memory.hpp
/// @brief Memory resources: where sketchcore's temporaries come from, and their statistics.
#pragma once

#include <cstddef>
#include <new>
#include <optional>
#include <string>

#include "sketchcore/export.hpp"

namespace sketchcore {

/// Counters of a memory resource. Bytes are counted in the sizes actually reserved
/// (requests are rounded up to size classes).
struct MemoryStats {
  std::size_t current_bytes = 0;   ///< bytes handed out and not yet returned
  std::size_t peak_bytes = 0;      ///< maximum of current_bytes since the last reset_peak()
  std::size_t reserved_bytes = 0;  ///< bytes held from the system: handed out + cached
  std::size_t num_allocs = 0;      ///< allocate() calls that succeeded
  std::size_t num_cache_hits = 0;  ///< of those, served from the cache without the system
  std::size_t limit_bytes = 0;     ///< cap on reserved_bytes; 0 = no limit
};

/// Thrown when an allocation would exceed a resource's limit (or the system has no memory).
class SKETCHCORE_API out_of_memory : public std::bad_alloc {
 public:
  /// Creates the error with a complete, human-readable message.
  explicit out_of_memory(std::string message);
  /// The message given at construction.
  const char* what() const noexcept override;

 private:
  std::string message_;
};

/// Interface of a source of temporary memory. Implementations must be thread-safe.
class SKETCHCORE_API MemoryResource {
 public:
  virtual ~MemoryResource();
  /// Returns at least `bytes` bytes aligned to 64 bytes; throws out_of_memory on failure.
  virtual void* allocate(std::size_t bytes) = 0;
  /// Returns a block obtained from allocate(bytes) with the same `bytes`.
  virtual void deallocate(void* block, std::size_t bytes) noexcept = 0;
  /// Current counters.
  virtual MemoryStats stats() const = 0;
};

/// A caching, size-classed, thread-safe pool of host memory: freed blocks are kept per
/// size class (four classes per power of two, at least 512 bytes) and reused, so that
/// steady-state calls make no system allocation.
class SKETCHCORE_API CachingHostPool final : public MemoryResource {
 public:
  CachingHostPool();
  ~CachingHostPool() override;
  CachingHostPool(const CachingHostPool&) = delete;
  CachingHostPool& operator=(const CachingHostPool&) = delete;

  void* allocate(std::size_t bytes) override;
  void deallocate(void* block, std::size_t bytes) noexcept override;
  MemoryStats stats() const override;

  /// Sets peak_bytes to current_bytes.
  void reset_peak() noexcept;
  /// Returns every cached (unused) block to the system.
  void empty_cache() noexcept;
  /// Caps reserved_bytes at `limit` bytes (nullopt: no cap). An allocation that would
  /// exceed it first releases the cache, then throws out_of_memory.
  void set_limit(std::optional<std::size_t> limit) noexcept;
  /// The size class a request of `bytes` is rounded up to (`bytes` itself above 2**62, a
  /// request allocate() refuses with out_of_memory).
  static std::size_t size_class(std::size_t bytes) noexcept;

 private:
  struct State;
  State* state_;
};

/// The pool every CPU temporary of sketchcore comes from unless another resource is set.
SKETCHCORE_API CachingHostPool& default_host_pool();

/// The resource CPU temporaries currently come from.
SKETCHCORE_API MemoryResource& host_memory_resource() noexcept;

/// Routes CPU temporaries to `resource` (nullptr: back to default_host_pool()). The
/// resource must outlive every call that may use it.
SKETCHCORE_API void set_host_memory_resource(MemoryResource* resource) noexcept;

/// Interface of a source of CUDA device memory for temporaries, ordered on streams as
/// cudaMallocAsync is: a block allocated on `stream` is used by work queued on `stream`
/// after the call and is returned on the same stream once that work is queued (the
/// resource must not hand it out for other streams' work before that work ran). Lets an
/// application share one pool with its framework (PyTorch's caching allocator, CuPy's
/// pool). Implementations must be thread-safe.
class SKETCHCORE_API DeviceMemoryResource {
 public:
  virtual ~DeviceMemoryResource();
  /// At least `bytes` (> 0) bytes of device `device`, aligned to 256 bytes, usable in stream
  /// order on `stream` (a cudaStream_t; null is the legacy default stream).
  /// @throws out_of_memory (or any std::exception) when it cannot
  virtual void* allocate(std::size_t bytes, int device, void* stream) = 0;
  /// Returns a block obtained from allocate(bytes, device, stream) with the same arguments.
  virtual void deallocate(void* block, std::size_t bytes, int device, void* stream) noexcept = 0;
};

/// Routes the CUDA backend's temporaries to `resource` (nullptr: back to sketchcore's own
/// stream-ordered pool). A block always returns to the resource it came from, so the
/// resource may be changed between calls; it must outlive the calls that use it.
SKETCHCORE_API void set_device_memory_resource(DeviceMemoryResource* resource) noexcept;

/// The resource set by set_device_memory_resource(), or nullptr for sketchcore's own pool.
SKETCHCORE_API DeviceMemoryResource* device_memory_resource() noexcept;

/// Counters of the CUDA temporaries on device `device` (all zero when the CUDA backend is
/// absent or the device was not used): current/peak bytes and allocations count every
/// temporary, whichever resource it came from; reserved_bytes is what sketchcore's own
/// pool holds from the driver; limit_bytes is 0.
/// @throws std::invalid_argument for a negative device
SKETCHCORE_API MemoryStats device_memory_stats(int device);

/// Sets peak_bytes of device `device`'s pool to its current_bytes.
SKETCHCORE_API void device_reset_peak(int device);

/// Waits for the device's work, then returns the memory its pool caches (not in use) to
/// the driver.
/// @throws cuda_error when the device cannot be synchronised
SKETCHCORE_API void device_empty_cache(int device);

}  // namespace sketchcore
