// What the Cython bindings cannot express themselves: the one translation of sketchcore's
// C++ exceptions into Python exceptions (the handler of every `except +raise_py_error`
// declaration in _sketchcore.pxd), the per-thread execution scope (CUDA stream, TF32, the CPU GEMMs' BLAS), and the device
// memory resource that calls back into a Python allocator.
#pragma once

#include <Python.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <algorithm>
#include <utility>
#include <vector>

#include "sketchcore/sketchcore.hpp"

namespace sketchcore_python {

/// Called by Cython (with the GIL held) inside `catch (...)`: sets the Python exception of
/// the C++ exception in flight. dtype and device errors are TypeError, other invalid
/// arguments ValueError, allocation failures MemoryError, everything else RuntimeError.
inline void raise_py_error() {
  try {
    throw;
  } catch (const sketchcore::dtype_error& e) {
    PyErr_SetString(PyExc_TypeError, e.what());
  } catch (const sketchcore::device_error& e) {
    PyErr_SetString(PyExc_TypeError, e.what());
  } catch (const std::invalid_argument& e) {  // shape_error and other bad values
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const std::bad_alloc& e) {
    const std::string what = e.what();
    PyErr_SetString(PyExc_MemoryError, what.empty() ? "sketchcore: out of memory" : what.c_str());
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "unknown C++ exception");
  }
}

/// Makes (stream, allow_tf32, cpu_gemm, tune_gemms) the calling thread's execution options for
/// the calls that follow on this thread (the bindings set them before every call).
inline void set_thread_execution(std::uintptr_t stream, bool allow_tf32, const sketchcore::CpuGemmProvider* cpu_gemm,
                                 bool tune_gemms) noexcept {
  static thread_local std::optional<sketchcore::ExecutionScope> scope;
  scope.reset();
  scope.emplace(sketchcore::ExecutionOptions{reinterpret_cast<void*>(stream), allow_tf32, cpu_gemm, tune_gemms});
}

/// The BLAS of each framework whose arrays the bindings take (see sketchcore._cpu_blas):
/// process-wide, set once when found; entry 0 NumPy, 1 torch.
inline sketchcore::CpuGemmProvider& framework_gemm(int framework) noexcept {
  static sketchcore::CpuGemmProvider providers[2];
  return providers[framework == 0 ? 0 : 1];
}

/// A view of `ndim` extents and strides read straight from a DLPack tensor (null strides:
/// compact row-major), built without intermediate vectors; throws shape_error as TensorView, and
/// for a negative ndim or a missing shape (a malformed capsule).
inline sketchcore::TensorView view_of(void* data, sketchcore::DType dtype, const std::int64_t* shape,
                                      const std::int64_t* strides, int ndim, sketchcore::Device device) {
  // Bounded before the shape is read: a corrupt ndim would read past the producer's shape array.
  constexpr int kMaxDims = 64;  // NumPy's limit; no producer exports more
  if (ndim < 0 || ndim > kMaxDims) {
    throw sketchcore::shape_error("expected a DLPack tensor with 0 <= ndim <= " + std::to_string(kMaxDims) +
                                  ", got ndim " + std::to_string(ndim));
  }
  if (ndim > 0 && shape == nullptr) {
    throw sketchcore::shape_error("expected a DLPack tensor with a shape, got a null shape with ndim " +
                                  std::to_string(ndim));
  }
  std::vector<std::int64_t> extents(shape, shape + ndim);
  std::vector<std::int64_t> steps;
  if (strides) steps.assign(strides, strides + ndim);
  return sketchcore::TensorView(data, dtype, std::move(extents), std::move(steps), device);
}

/// [a; b] along dimension 0 as one view, when b continues a in memory with a's strides (how
/// SKLinear stores [S1s; U2s] and [U1s; S2s]); false, and `joined` untouched, otherwise.
inline bool join_views(const sketchcore::TensorView& a, const sketchcore::TensorView& b,
                       sketchcore::TensorView& joined) {
  if (a.ndim() < 1 || a.ndim() != b.ndim() || a.dtype() != b.dtype() || a.device() != b.device() ||
      a.strides() != b.strides() || a.shape().size() != b.shape().size() ||
      !std::equal(a.shape().begin() + 1, a.shape().end(), b.shape().begin() + 1)) {
    return false;
  }
  const auto step = a.strides()[0] * static_cast<std::int64_t>(sketchcore::dtype_size(a.dtype()));
  if (static_cast<char*>(b.data()) != static_cast<char*>(a.data()) + a.shape()[0] * step) return false;
  std::vector<std::int64_t> shape = a.shape();
  shape[0] += b.shape()[0];
  joined = sketchcore::TensorView(a.data(), a.dtype(), std::move(shape), a.strides(), a.device());
  return true;
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
inline std::uintptr_t device_resource_allocate(std::size_t bytes, int device, std::uintptr_t stream) {
  return reinterpret_cast<std::uintptr_t>(
      installed_device_resource().allocate(bytes, device, reinterpret_cast<void*>(stream)));
}

inline void device_resource_deallocate(std::uintptr_t block, std::size_t bytes, int device, std::uintptr_t stream) {
  installed_device_resource().deallocate(reinterpret_cast<void*>(block), bytes, device, reinterpret_cast<void*>(stream));
}

}  // namespace sketchcore_python
