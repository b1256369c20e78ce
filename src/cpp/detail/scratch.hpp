// Temporary buffers of the CPU backend. (The pooled memory resource replaces this with
// size-classed reuse; every temporary already goes through this one type.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

namespace sketchcore::detail {

/// An uninitialised, 64-byte aligned array of `count` elements of T, freed on scope exit.
template <class T>
class Scratch {
 public:
  Scratch() = default;
  explicit Scratch(std::int64_t count) { allocate(count); }

  /// (Re)allocates room for `count` elements; throws std::bad_alloc on failure.
  T* allocate(std::int64_t count) {
    const std::size_t bytes = ((static_cast<std::size_t>(count) * sizeof(T) + 63) / 64) * 64;
    void* p = std::aligned_alloc(64, bytes == 0 ? 64 : bytes);
    if (!p) throw std::bad_alloc();
    data_.reset(static_cast<T*>(p));
    return data();
  }
  T* data() const noexcept { return data_.get(); }

 private:
  struct Free {
    void operator()(T* p) const noexcept { std::free(p); }
  };
  std::unique_ptr<T, Free> data_;
};

}  // namespace sketchcore::detail
