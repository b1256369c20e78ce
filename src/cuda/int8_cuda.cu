// int8_sketched_matmul on a CUDA device (cuda_ops.cuh), on the calling thread's stream:
//   x ─quantize rows→ xq (int8) ─cuBLASLt int8 GEMM with S→ int32 ─dequantize, σ, requantize→ zq
//     ─cuBLASLt int8 GEMM with U→ int32 ─dequantize, bias, activation→ out (float32)
// The factors live on the device in cuBLASLt's layout (detail/int8_device.hpp), uploaded on a
// factor's first call on a device and kept by the factor; the temporaries (the quantized rows,
// their scales, the int32 sums) come from the stream-ordered pool.
//
// int8_matmul (full rank) is the last step alone: x ─quantize rows (the epilogue's scale folded
// in)→ xq ─cuBLASLt int8 GEMM with W→ int32 ─dequantize, bias, activation→ out.
//
// UNVERIFIED: compiled by nvcc (sm_90) but never run on a GPU; the backend refuses it unless the
// gated path cuda_int8_factors is open.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "cuda_common.cuh"
#include "cuda_ops.cuh"
#include "detail/int8_device.hpp"
#include "device_pool.cuh"
#include "int8_kernels.cuh"
#include "kernels.cuh"
#include "lt_gemm.cuh"

namespace sketchcore::cuda {

namespace {

/// A factor in device memory: one cudaMalloc block holding the values and then the scales.
struct DeviceFactor {
  int device = 0;
  std::int64_t k_pad = 0, n_pad = 0;
  void* block = nullptr;
  const std::int8_t* values = nullptr;
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

/// Bytes of the values, rounded so that the scales that follow are 256-byte aligned.
std::size_t value_bytes(const detail::Int8DeviceLayout& layout) {
  const std::size_t bytes = layout.values.size();
  return (bytes + 255) / 256 * 256;
}

/// The copy of `factor` on `device` (the current device), uploaded on first use.
std::shared_ptr<const DeviceFactor> device_factor(const Int8Factor& factor, int device) {
  std::shared_ptr<const void> copy = detail::int8_device_copies(factor).get_or_make(device, [&] {
    const detail::Int8DeviceLayout layout = detail::int8_device_layout(factor);
    auto made = std::make_shared<DeviceFactor>();
    made->device = device;
    made->k_pad = layout.k_pad;
    made->n_pad = layout.n_pad;
    const std::size_t values = value_bytes(layout), scales = layout.scales.size() * sizeof(float);
    const RelaxedCaptureMode setup_may_be_captured;
    check(cudaMalloc(&made->block, values + scales), "cudaMalloc (int8 factor)");
    auto* base = static_cast<std::int8_t*>(made->block);
    check(cudaMemcpy(base, layout.values.data(), layout.values.size(), cudaMemcpyHostToDevice),
          "cudaMemcpy (int8 factor values)");
    check(cudaMemcpy(base + values, layout.scales.data(), scales, cudaMemcpyHostToDevice),
          "cudaMemcpy (int8 factor scales)");
    // A pageable host-to-device cudaMemcpy may return before the data reaches the device, and a
    // non-blocking caller stream is not ordered after the legacy stream it ran on: wait for it.
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (int8 factor upload)");
    made->values = base;
    made->scales = reinterpret_cast<const float*>(base + values);
    return std::shared_ptr<const void>(std::move(made));
  });
  return std::static_pointer_cast<const DeviceFactor>(copy);
}

template <class T>
DeviceBuffer scratch(int device, std::int64_t count, cudaStream_t stream) {
  return DeviceBuffer(device, static_cast<std::size_t>(count) * sizeof(T), stream);
}

}  // namespace

void int8_sketched_matmul_on_device(const detail::Int8MatmulProblem& p) {
  const int device = p.x.device().index;
  DeviceGuard guard(device);
  if (p.rows == 0 || p.d_out == 0) return;
  const cudaStream_t stream = current_stream();
  const std::shared_ptr<const DeviceFactor> S = device_factor(p.S, device);
  const std::shared_ptr<const DeviceFactor> U = device_factor(p.U, device);
  const std::int64_t rows = p.rows;

  // x → int8 rows (leading dimension S.k_pad, the padding zeros).
  DeviceBuffer xq = scratch<std::int8_t>(device, rows * S->k_pad, stream);
  DeviceBuffer x_scale = scratch<float>(device, rows, stream);
  quantize_rows_int8(static_cast<const float*>(p.x.data()), row_layout_of(p.x), rows, p.d_in, xq.as<std::int8_t>(),
                     S->k_pad, x_scale.as<float>(), stream);

  // Sums of x·S (rows × S.n_pad), then σ of their dequantized values requantized per row, with
  // the epilogue's scale folded into the row scales (as on the CPU).
  DeviceBuffer sums = scratch<std::int32_t>(device, rows * S->n_pad, stream);
  lt_gemm_int8(device, S->n_pad, rows, S->k_pad, S->values, xq.as<std::int8_t>(), sums.as<std::int32_t>(), stream);
  DeviceBuffer zq = scratch<std::int8_t>(device, rows * U->k_pad, stream);
  DeviceBuffer z_scale = scratch<float>(device, rows, stream);
  requantize_rows_int8(sums.as<std::int32_t>(), S->n_pad, x_scale.as<float>(), S->scales, rows, p.rank,
                       p.epilogue.inner_activation, static_cast<float>(p.epilogue.scale), zq.as<std::int8_t>(),
                       U->k_pad, z_scale.as<float>(), stream);

  // Sums of zq·U (rows × U.n_pad), dequantized with bias and activation into out.
  DeviceBuffer out_sums = scratch<std::int32_t>(device, rows * U->n_pad, stream);
  lt_gemm_int8(device, U->n_pad, rows, U->k_pad, U->values, zq.as<std::int8_t>(), out_sums.as<std::int32_t>(),
               stream);
  const float* bias = p.epilogue.bias ? static_cast<const float*>(p.epilogue.bias->data()) : nullptr;
  const std::int64_t bias_stride = p.epilogue.bias ? p.epilogue.bias->stride(0) : 0;
  dequantize_rows_int8(out_sums.as<std::int32_t>(), U->n_pad, z_scale.as<float>(), U->scales, rows, p.d_out, bias,
                       bias_stride, p.epilogue.activation, static_cast<float*>(p.out.data()), p.out_row_stride,
                       stream);
}

void int8_matmul_on_device(const detail::Int8DenseProblem& p) {
  const int device = p.x.device().index;
  DeviceGuard guard(device);
  if (p.rows == 0 || p.d_out == 0) return;
  const cudaStream_t stream = current_stream();
  const std::shared_ptr<const DeviceFactor> W = device_factor(p.W, device);
  const std::int64_t rows = p.rows;

  // x → int8 rows (leading dimension W.k_pad, the padding zeros), the epilogue's scale folded in.
  DeviceBuffer xq = scratch<std::int8_t>(device, rows * W->k_pad, stream);
  DeviceBuffer x_scale = scratch<float>(device, rows, stream);
  quantize_rows_int8(static_cast<const float*>(p.x.data()), row_layout_of(p.x), rows, p.d_in, xq.as<std::int8_t>(),
                     W->k_pad, x_scale.as<float>(), stream, static_cast<float>(p.epilogue.scale));

  // Sums of xq·W (rows × W.n_pad), dequantized with bias and activation into out.
  DeviceBuffer sums = scratch<std::int32_t>(device, rows * W->n_pad, stream);
  lt_gemm_int8(device, W->n_pad, rows, W->k_pad, W->values, xq.as<std::int8_t>(), sums.as<std::int32_t>(), stream);
  const float* bias = p.epilogue.bias ? static_cast<const float*>(p.epilogue.bias->data()) : nullptr;
  const std::int64_t bias_stride = p.epilogue.bias ? p.epilogue.bias->stride(0) : 0;
  dequantize_rows_int8(sums.as<std::int32_t>(), W->n_pad, x_scale.as<float>(), W->scales, rows, p.d_out, bias,
                       bias_stride, p.epilogue.activation, static_cast<float*>(p.out.data()), p.out_row_stride,
                       stream);
}

}  // namespace sketchcore::cuda
