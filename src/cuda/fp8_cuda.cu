// fp8_sketched_matmul on a CUDA device (cuda_ops.cuh), on the calling thread's stream:
//   x ─quantize rows→ xq (e4m3) ─cuBLASLt fp8 GEMM with S→ float32 ─dequantize, σ, requantize→ zq
//     ─cuBLASLt fp8 GEMM with U→ float32 ─dequantize, bias, activation→ out (float32)
// The factors live on the device in cuBLASLt's layout (detail/fp8_device.hpp), uploaded on a
// factor's first call on a device and kept by the factor; the temporaries (the quantized rows,
// their scales, the float32 sums) come from the stream-ordered pool.
//
// UNVERIFIED: compiled by nvcc (sm_90) but never run on a GPU; the backend refuses it unless the
// gated path cuda_fp8_factors is open.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "cuda_common.cuh"
#include "cuda_ops.cuh"
#include "detail/fp8_device.hpp"
#include "device_pool.cuh"
#include "fp8_kernels.cuh"
#include "kernels.cuh"
#include "lt_gemm.cuh"
#include "sketchcore/errors.hpp"

namespace sketchcore::cuda {

namespace {

/// A factor in device memory: one cudaMalloc block holding the codes and then the scales.
struct DeviceFactor {
  int device = 0;
  std::int64_t k_pad = 0, n_pad = 0;
  void* block = nullptr;
  const std::uint8_t* codes = nullptr;
  const float* scales = nullptr;

  DeviceFactor() = default;
  DeviceFactor(const DeviceFactor&) = delete;
  DeviceFactor& operator=(const DeviceFactor&) = delete;
  ~DeviceFactor() {
    if (!block) return;
    int previous = -1;
    const bool switched = cudaGetDevice(&previous) == cudaSuccess && cudaSetDevice(device) == cudaSuccess;
    cudaFree(block);  // synchronises: no call still reads the factor
    if (switched) cudaSetDevice(previous);
  }
};

/// The copy of `factor` on `device` (the current device), uploaded on first use.
std::shared_ptr<const DeviceFactor> device_factor(const Fp8Factor& factor, int device) {
  const Fp8Factor::Storage& s = factor.storage();
  std::shared_ptr<const void> copy = s.device_copies.get_or_make(device, [&] {
    auto made = std::make_shared<DeviceFactor>();
    made->device = device;
    made->k_pad = s.k_pad;
    made->n_pad = s.n_pad;
    const std::size_t codes = (s.codes.size() + 255) / 256 * 256;  // the scales start 256-byte aligned
    const std::size_t scales = s.scales.size() * sizeof(float);
    const RelaxedCaptureMode setup_may_be_captured;
    check(cudaMalloc(&made->block, codes + scales), "cudaMalloc (fp8 factor)");
    auto* base = static_cast<std::uint8_t*>(made->block);
    check(cudaMemcpy(base, s.codes.data(), s.codes.size(), cudaMemcpyHostToDevice), "cudaMemcpy (fp8 factor codes)");
    check(cudaMemcpy(base + codes, s.scales.data(), scales, cudaMemcpyHostToDevice), "cudaMemcpy (fp8 factor scales)");
    // A pageable host-to-device cudaMemcpy may return before the data reaches the device, and a
    // non-blocking caller stream is not ordered after the legacy stream it ran on: wait for it.
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (fp8 factor upload)");
    made->codes = base;
    made->scales = reinterpret_cast<const float*>(base + codes);
    return std::shared_ptr<const void>(std::move(made));
  });
  return std::static_pointer_cast<const DeviceFactor>(copy);
}

template <class T>
DeviceBuffer scratch(int device, std::int64_t count, cudaStream_t stream) {
  return DeviceBuffer(device, static_cast<std::size_t>(count) * sizeof(T), stream);
}

/// Throws device_error unless `device` has fp8 tensor cores (compute capability 8.9 or newer).
void require_fp8_device(int device) {
  int major = 0, minor = 0;
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "cudaDeviceGetAttribute");
  if (major * 10 + minor < 89) {
    throw device_error("fp8_sketched_matmul: x: expected an array on a CUDA device of compute capability 8.9 or "
                       "newer (cuBLASLt's fp8 GEMMs), got cuda:" + std::to_string(device) + " of compute capability " +
                       std::to_string(major) + "." + std::to_string(minor));
  }
}

}  // namespace

void fp8_sketched_matmul_on_device(const detail::Fp8MatmulProblem& p) {
  const int device = p.x.device().index;
  DeviceGuard guard(device);
  require_fp8_device(device);
  if (p.rows == 0 || p.d_out == 0) return;
  const cudaStream_t stream = current_stream();
  const std::shared_ptr<const DeviceFactor> S = device_factor(p.S, device);
  const std::shared_ptr<const DeviceFactor> U = device_factor(p.U, device);
  const std::int64_t rows = p.rows;

  // x → e4m3 rows (leading dimension S.k_pad, the padding zeros).
  DeviceBuffer xq = scratch<std::uint8_t>(device, rows * S->k_pad, stream);
  DeviceBuffer x_scale = scratch<float>(device, rows, stream);
  quantize_rows_fp8(static_cast<const float*>(p.x.data()), row_layout_of(p.x), rows, p.d_in, xq.as<std::uint8_t>(),
                    S->k_pad, x_scale.as<float>(), stream);

  // Sums of x·S (rows × S.n_pad), then σ of their dequantized values requantized per row, with
  // the epilogue's scale folded into the row scales (as the int8 path does).
  DeviceBuffer sums = scratch<float>(device, rows * S->n_pad, stream);
  lt_gemm_fp8(device, S->n_pad, rows, S->k_pad, S->codes, xq.as<std::uint8_t>(), sums.as<float>(), stream);
  DeviceBuffer zq = scratch<std::uint8_t>(device, rows * U->k_pad, stream);
  DeviceBuffer z_scale = scratch<float>(device, rows, stream);
  requantize_rows_fp8(sums.as<float>(), S->n_pad, x_scale.as<float>(), S->scales, rows, p.rank,
                      p.epilogue.inner_activation, static_cast<float>(p.epilogue.scale), zq.as<std::uint8_t>(),
                      U->k_pad, z_scale.as<float>(), stream);

  // Sums of zq·U (rows × U.n_pad), dequantized with bias and activation into out.
  DeviceBuffer out_sums = scratch<float>(device, rows * U->n_pad, stream);
  lt_gemm_fp8(device, U->n_pad, rows, U->k_pad, U->codes, zq.as<std::uint8_t>(), out_sums.as<float>(), stream);
  const float* bias = p.epilogue.bias ? static_cast<const float*>(p.epilogue.bias->data()) : nullptr;
  const std::int64_t bias_stride = p.epilogue.bias ? p.epilogue.bias->stride(0) : 0;
  dequantize_rows_fp8(out_sums.as<float>(), U->n_pad, z_scale.as<float>(), U->scales, rows, p.d_out, bias,
                      bias_stride, p.epilogue.activation, static_cast<float*>(p.out.data()), p.out_row_stride,
                      stream);
}

}  // namespace sketchcore::cuda
