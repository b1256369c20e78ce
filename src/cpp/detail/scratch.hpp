// Temporary buffers of the CPU backend, always drawn from host_memory_resource() and
// returned on scope exit (also when an exception unwinds), so nothing leaks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "sketchcore/memory.hpp"

namespace sketchcore::detail {

/// An uninitialised, 64-byte aligned array of T from the host memory resource.
template <class T>
class Scratch {
 public:
  Scratch() = default;
  explicit Scratch(std::int64_t count) { allocate(count); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  Scratch(Scratch&& other) noexcept
      : resource_(std::exchange(other.resource_, nullptr)), data_(std::exchange(other.data_, nullptr)),
        bytes_(std::exchange(other.bytes_, 0)) {}
  ~Scratch() { release(); }

  /// (Re)allocates room for `count` elements; throws out_of_memory on failure.
  T* allocate(std::int64_t count) {
    release();
    std::size_t bytes;
    if (__builtin_mul_overflow(static_cast<std::size_t>(count > 0 ? count : 1), sizeof(T), &bytes)) {
      throw out_of_memory("sketchcore: a temporary of " + std::to_string(count) + " elements of " +
                          std::to_string(sizeof(T)) + " bytes exceeds the address space");
    }
    MemoryResource& resource = host_memory_resource();
    data_ = static_cast<T*>(resource.allocate(bytes));
    resource_ = &resource;
    bytes_ = bytes;
    return data_;
  }
  T* data() const noexcept { return data_; }
  T& operator[](std::size_t i) const noexcept { return data_[i]; }

 private:
  void release() noexcept {
    if (data_) resource_->deallocate(data_, bytes_);
    data_ = nullptr;
  }
  MemoryResource* resource_ = nullptr;
  T* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace sketchcore::detail
