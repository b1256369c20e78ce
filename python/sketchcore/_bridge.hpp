// Calls into the public C++ API from Cython without letting a C++ exception cross into
// Python: each call returns an error kind and message, so the binding can run it with the
// GIL released and raise the matching Python exception afterwards.
#pragma once

#include <cstdint>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "sketchcore/sketchcore.hpp"

namespace sketchcore_python {

enum class ErrorKind : int { none = 0, value = 1, type = 2, memory = 3, runtime = 4 };

template <class Fn>
ErrorKind guarded(Fn&& fn, std::string& message) noexcept {
  try {
    fn();
    return ErrorKind::none;
  } catch (const sketchcore::dtype_error& e) {
    message = e.what();
    return ErrorKind::type;
  } catch (const sketchcore::device_error& e) {
    message = e.what();
    return ErrorKind::type;
  } catch (const std::invalid_argument& e) {  // shape_error and other bad values
    message = e.what();
    return ErrorKind::value;
  } catch (const std::bad_alloc& e) {
    message = e.what();
    return ErrorKind::memory;
  } catch (const std::exception& e) {
    message = e.what();
    return ErrorKind::runtime;
  } catch (...) {
    message = "unknown C++ exception";
    return ErrorKind::runtime;
  }
}

/// Makes (stream, allow_tf32) the calling thread's CUDA execution options for the calls
/// that follow on this thread (the bindings set them before every CUDA call).
inline void set_thread_execution(std::uintptr_t stream, bool allow_tf32) noexcept {
  static thread_local std::optional<sketchcore::ExecutionScope> scope;
  scope.reset();
  scope.emplace(sketchcore::ExecutionOptions{reinterpret_cast<void*>(stream), allow_tf32});
}

inline int cuda_device_count() noexcept { return sketchcore::cuda_device_count(); }

inline ErrorKind device_memory_stats(int device, sketchcore::MemoryStats& stats, std::string& message) noexcept {
  return guarded([&] { stats = sketchcore::device_memory_stats(device); }, message);
}

inline ErrorKind device_reset_peak(int device, std::string& message) noexcept {
  return guarded([&] { sketchcore::device_reset_peak(device); }, message);
}

inline ErrorKind device_empty_cache(int device, std::string& message) noexcept {
  return guarded([&] { sketchcore::device_empty_cache(device); }, message);
}

/// Callbacks of a device memory resource implemented in Python (they take the GIL).
/// allocate returns null and sets `error` when it fails.
using DeviceAllocateCallback = void* (*)(void* owner, std::size_t bytes, int device, std::uintptr_t stream,
                                         std::string* error);
using DeviceDeallocateCallback = void (*)(void* owner, void* block, std::size_t bytes, int device,
                                          std::uintptr_t stream);

/// A DeviceMemoryResource that forwards to Python callbacks (sketchcore.memory.set_device_allocator).
class CallbackDeviceResource final : public sketchcore::DeviceMemoryResource {
 public:
  CallbackDeviceResource(void* owner, DeviceAllocateCallback allocate, DeviceDeallocateCallback deallocate)
      : owner_(owner), allocate_(allocate), deallocate_(deallocate) {}

  void* allocate(std::size_t bytes, int device, void* stream) override {
    std::string error;
    void* block = allocate_(owner_, bytes, device, reinterpret_cast<std::uintptr_t>(stream), &error);
    if (!block) {
      throw sketchcore::out_of_memory("sketchcore: the device allocator could not provide " + std::to_string(bytes) +
                                      " bytes on CUDA device " + std::to_string(device) + ": " + error);
    }
    return block;
  }
  void deallocate(void* block, std::size_t bytes, int device, void* stream) noexcept override {
    deallocate_(owner_, block, bytes, device, reinterpret_cast<std::uintptr_t>(stream));
  }

 private:
  void* owner_;
  DeviceAllocateCallback allocate_;
  DeviceDeallocateCallback deallocate_;
};

/// Routes CUDA temporaries to the Python allocator `owner` (kept alive by the caller for the
/// life of the process) or, when `owner` is null, back to sketchcore's pool. Resources are
/// never destroyed: a call on another thread may still return a block to the previous one.
inline void set_callback_device_resource(void* owner, DeviceAllocateCallback allocate,
                                         DeviceDeallocateCallback deallocate) {
  if (!owner) {
    sketchcore::set_device_memory_resource(nullptr);
    return;
  }
  sketchcore::set_device_memory_resource(new CallbackDeviceResource(owner, allocate, deallocate));
}

/// The application's device resource; throws when sketchcore's own pool is in use.
inline sketchcore::DeviceMemoryResource& installed_device_resource() {
  sketchcore::DeviceMemoryResource* resource = sketchcore::device_memory_resource();
  if (!resource) throw std::logic_error("sketchcore: no device allocator is set (sketchcore's own pool is used)");
  return *resource;
}

/// allocate / deallocate on the installed device resource directly, without a device: lets
/// the tests drive a Python allocator through the C++ path on any machine.
inline ErrorKind device_resource_allocate(std::size_t bytes, int device, std::uintptr_t stream, std::uintptr_t& block,
                                          std::string& message) noexcept {
  return guarded([&] {
    void* address = installed_device_resource().allocate(bytes, device, reinterpret_cast<void*>(stream));
    block = reinterpret_cast<std::uintptr_t>(address);
  }, message);
}

inline ErrorKind device_resource_deallocate(std::uintptr_t block, std::size_t bytes, int device, std::uintptr_t stream,
                                            std::string& message) noexcept {
  return guarded([&] {
    installed_device_resource().deallocate(reinterpret_cast<void*>(block), bytes, device,
                                           reinterpret_cast<void*>(stream));
  }, message);
}

inline sketchcore::Epilogue make_epilogue(const sketchcore::TensorView* bias, double scale, const std::string& activation,
                                          double dropout_p, std::uint64_t seed) {
  sketchcore::Epilogue epilogue;
  epilogue.scale = scale;
  epilogue.dropout_p = dropout_p;
  epilogue.seed = seed;
  epilogue.activation = sketchcore::parse_activation(activation);
  if (bias) epilogue.bias = *bias;
  return epilogue;
}

inline ErrorKind output_shape(const sketchcore::TensorView& x, const sketchcore::TensorView& S,
                              const sketchcore::TensorView& U, std::vector<int64_t>& shape,
                              std::string& message) noexcept {
  return guarded([&] { shape = sketchcore::sketched_matmul_output_shape(x, S, U); }, message);
}

inline ErrorKind sketched_matmul(const sketchcore::TensorView& x, const sketchcore::TensorView& S,
                                 const sketchcore::TensorView& U, const sketchcore::TensorView& out,
                                 const sketchcore::TensorView* bias, double scale, const std::string& activation,
                                 double dropout_p, std::uint64_t seed, std::string& message) noexcept {
  return guarded([&] { sketchcore::sketched_matmul(x, S, U, out, make_epilogue(bias, scale, activation, dropout_p, seed)); },
                 message);
}

inline ErrorKind sketched_matmul_saving(const sketchcore::TensorView& x, const sketchcore::TensorView& S,
                                        const sketchcore::TensorView& U, const sketchcore::TensorView& out,
                                        const sketchcore::TensorView* bias, double scale, const std::string& activation,
                                        double dropout_p, std::uint64_t seed, const sketchcore::TensorView& intermediate,
                                        std::string& message) noexcept {
  return guarded([&] {
    sketchcore::sketched_matmul(x, S, U, out, make_epilogue(bias, scale, activation, dropout_p, seed), intermediate);
  }, message);
}

inline ErrorKind sketched_matmul_backward(const sketchcore::TensorView& grad_out, const sketchcore::TensorView& x,
                                          const sketchcore::TensorView& S, const sketchcore::TensorView& U,
                                          const sketchcore::TensorView& intermediate, const sketchcore::TensorView* bias,
                                          double scale, const std::string& activation, double dropout_p,
                                          std::uint64_t seed, const sketchcore::TensorView* dx,
                                          const sketchcore::TensorView* dS, const sketchcore::TensorView* dU,
                                          const sketchcore::TensorView* dbias, std::int64_t s_begin,
                                          std::int64_t s_end, std::int64_t u_begin, std::int64_t u_end,
                                          std::string& message) noexcept {
  return guarded([&] {
    sketchcore::SketchedMatmulGradients grads;
    grads.S_terms = {s_begin, s_end};
    grads.U_terms = {u_begin, u_end};
    if (dx) grads.x = *dx;
    if (dS) grads.S = *dS;
    if (dU) grads.U = *dU;
    if (dbias) grads.bias = *dbias;
    sketchcore::sketched_matmul_backward(grad_out, x, S, U, intermediate,
                                         make_epilogue(bias, scale, activation, dropout_p, seed), grads);
  }, message);
}

inline ErrorKind host_pool_set_limit(bool has_limit, std::size_t limit, std::string& message) noexcept {
  return guarded([&] {
    sketchcore::default_host_pool().set_limit(has_limit ? std::optional<std::size_t>(limit) : std::nullopt);
  }, message);
}

inline sketchcore::SketchOperator make_sketch(const std::string& kind, std::int64_t m, std::int64_t n,
                                             std::uint64_t seed, std::int64_t nnz, bool scaled) {
  sketchcore::SketchOperator op;
  op.kind = sketchcore::parse_sketch_kind(kind);
  op.rows = m;
  op.cols = n;
  op.seed = seed;
  op.nnz = nnz;
  op.scaled = scaled;
  sketchcore::validate_sketch(op);
  return op;
}

inline ErrorKind sketch_validate(const std::string& kind, std::int64_t m, std::int64_t n, std::uint64_t seed,
                                 std::int64_t nnz, bool scaled, std::string& message) noexcept {
  return guarded([&] { make_sketch(kind, m, n, seed, nnz, scaled); }, message);
}

inline ErrorKind sketch_to_dense(const std::string& kind, std::int64_t m, std::int64_t n, std::uint64_t seed,
                                 std::int64_t nnz, bool scaled, const sketchcore::TensorView& out,
                                 std::int64_t row0, std::int64_t col0, std::string& message) noexcept {
  return guarded([&] { sketchcore::sketch_to_dense(make_sketch(kind, m, n, seed, nnz, scaled), out, row0, col0); },
                 message);
}

inline ErrorKind sketch_output_shape(const std::string& kind, std::int64_t m, std::int64_t n, std::uint64_t seed,
                                     std::int64_t nnz, bool scaled, const sketchcore::TensorView& a, bool right,
                                     bool transpose, std::vector<int64_t>& shape, std::string& message) noexcept {
  return guarded([&] {
    shape = sketchcore::sketch_apply_output_shape(make_sketch(kind, m, n, seed, nnz, scaled), a,
                                                  right ? sketchcore::Side::right : sketchcore::Side::left, transpose);
  }, message);
}

inline ErrorKind sketch_apply(const std::string& kind, std::int64_t m, std::int64_t n, std::uint64_t seed,
                              std::int64_t nnz, bool scaled, const sketchcore::TensorView& a,
                              const sketchcore::TensorView& out, bool right, bool transpose,
                              std::string& message) noexcept {
  return guarded([&] {
    sketchcore::sketch_apply(make_sketch(kind, m, n, seed, nnz, scaled), a, out,
                             right ? sketchcore::Side::right : sketchcore::Side::left, transpose);
  }, message);
}

inline ErrorKind set_num_threads(int n, std::string& message) noexcept {
  return guarded([&] { sketchcore::set_num_threads(n); }, message);
}

}  // namespace sketchcore_python
