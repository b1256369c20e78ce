// Shared by the CUDA backend's units: error checks, the current device and stream, and
// element-type traits (half-precision types compute in float).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "sketchcore/execution.hpp"
#include "sketchcore/tensor.hpp"

namespace sketchcore::cuda {

/// Throws cuda_error naming `what` and the CUDA error when `status` is not cudaSuccess.
void check(cudaError_t status, const char* what);

/// Makes `device` current for the scope and restores the previous device after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

/// For one-time setup (the memory pool, the cuBLASLt handle) that may first happen while the
/// caller captures its stream into a CUDA graph: switches this thread to the relaxed capture
/// mode for the scope, in which such calls are allowed (the default, global mode refuses them
/// and invalidates the capture), and restores the previous mode after.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() noexcept { cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

/// The calling thread's stream (ExecutionOptions::cuda_stream).
inline cudaStream_t current_stream() noexcept {
  return static_cast<cudaStream_t>(current_execution().cuda_stream);
}

/// Element type traits: the storage type and the type arithmetic is done in.
template <class T> struct Element;
template <> struct Element<__half> {
  using Compute = float;
  static __device__ __forceinline__ float load(__half v) { return __half2float(v); }
  static __device__ __forceinline__ __half store(float v) { return __float2half_rn(v); }
};
template <> struct Element<__nv_bfloat16> {
  using Compute = float;
  static __device__ __forceinline__ float load(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 store(float v) { return __float2bfloat16_rn(v); }
};
template <> struct Element<float> {
  using Compute = float;
  static __device__ __forceinline__ float load(float v) { return v; }
  static __device__ __forceinline__ float store(float v) { return v; }
};
template <> struct Element<double> {
  using Compute = double;
  static __device__ __forceinline__ double load(double v) { return v; }
  static __device__ __forceinline__ double store(double v) { return v; }
};

/// Calls `fn(T{})` with the storage type of `dtype`.
template <class Fn>
void dispatch_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::float16: fn(__half{}); break;
    case DType::bfloat16: fn(__nv_bfloat16{}); break;
    case DType::float32: fn(float{}); break;
    case DType::float64: fn(double{}); break;
  }
}

}  // namespace sketchcore::cuda
