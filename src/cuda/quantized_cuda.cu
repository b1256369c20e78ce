// The quantized GEMMs on a CUDA device (cuda_ops.cuh), on the calling thread's stream, written once
// for every format; each format supplies its tile kernels (a Kernels struct below: int8_kernels.cuh,
// fp8_kernels.cuh, and its cuBLASLt product in lt_gemm.cuh):
//   x ─quantize rows→ xq ─GEMM with S→ sums ─dequantize, σ, requantize→ zq
//     ─GEMM with U→ sums ─dequantize, bias, activation→ out (float32)
// The full-rank GEMM is the last step alone: x ─quantize rows (the epilogue's scale folded in)→ xq
// ─GEMM with W→ sums ─dequantize, bias, activation→ out. The factors live on the device in their
// stored layout (detail/quantized_storage.hpp), uploaded on a factor's first call on a device and
// kept by the factor; the temporaries (quantized rows, their scales, the sums) come from the
// stream-ordered pool.
//
// UNVERIFIED: compiled by nvcc (sm_90) but never run on a GPU; the backend refuses each format
// unless its gated path (cuda_int8_factors, cuda_fp8_factors) is open.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "cuda_common.cuh"
#include "cuda_ops.cuh"
#include "detail/quantized_storage.hpp"
#include "device_pool.cuh"
#include "fp8_kernels.cuh"
#include "int8_kernels.cuh"
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
  const void* codes = nullptr;
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
std::shared_ptr<const DeviceFactor> device_factor(const QuantizedFactor& factor, int device) {
  const QuantizedFactor::Storage& s = factor.storage();
  std::shared_ptr<const void> copy = s.copies.get_or_make(device, [&] {
    auto made = std::make_shared<DeviceFactor>();
    made->device = device;
    made->k_pad = s.k_pad;
    made->n_pad = s.n_pad;
    const std::size_t codes = (s.codes.size() + 255) / 256 * 256;  // the scales start 256-byte aligned
    const std::size_t scales = s.scales.size() * sizeof(float);
    const RelaxedCaptureMode setup_may_be_captured;
    check(cudaMalloc(&made->block, codes + scales), "cudaMalloc (quantized factor)");
    auto* base = static_cast<std::uint8_t*>(made->block);
    check(cudaMemcpy(base, s.codes.data(), s.codes.size(), cudaMemcpyHostToDevice), "cudaMemcpy (factor codes)");
    check(cudaMemcpy(base + codes, s.scales.data(), scales, cudaMemcpyHostToDevice), "cudaMemcpy (factor scales)");
    // A pageable host-to-device cudaMemcpy may return before the data reaches the device, and a
    // non-blocking caller stream is not ordered after the legacy stream it ran on: wait for it.
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (factor upload)");
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

/// The int8 format's tile kernels: int8 codes, int32 sums (int8_kernels.cuh).
struct Int8Kernels {
  using Code = std::int8_t;
  using Sum = std::int32_t;
  static void quantize(const float* x, const RowLayout& layout, std::int64_t rows, std::int64_t cols, Code* dst,
                       std::int64_t ld, float* scale, cudaStream_t stream, float scale_factor) {
    quantize_rows_int8(x, layout, rows, cols, dst, ld, scale, stream, scale_factor);
  }
  static void gemm(int device, std::int64_t m, std::int64_t n, std::int64_t k, const Code* a, const Code* b, Sum* d,
                   cudaStream_t stream) {
    lt_gemm_int8(device, m, n, k, a, b, d, stream);
  }
  static constexpr auto requantize = requantize_rows_int8;
  static constexpr auto dequantize = dequantize_rows_int8;
};

/// The fp8 (e4m3) format's tile kernels: e4m3 codes, float32 sums (fp8_kernels.cuh).
struct Fp8Kernels {
  using Code = std::uint8_t;
  using Sum = float;
  static void quantize(const float* x, const RowLayout& layout, std::int64_t rows, std::int64_t cols, Code* dst,
                       std::int64_t ld, float* scale, cudaStream_t stream, float scale_factor) {
    if (scale_factor != 1.0f) throw device_error("fp8: the row quantization folds no scale (no full-rank fp8 GEMM)");
    quantize_rows_fp8(x, layout, rows, cols, dst, ld, scale, stream);
  }
  static void gemm(int device, std::int64_t m, std::int64_t n, std::int64_t k, const Code* a, const Code* b, Sum* d,
                   cudaStream_t stream) {
    lt_gemm_fp8(device, m, n, k, a, b, d, stream);
  }
  static constexpr auto requantize = requantize_rows_fp8;
  static constexpr auto dequantize = dequantize_rows_fp8;
};

/// out = act(deq(q(rows of `in`) · F) + bias): the last step of both GEMMs, from rows already quantized.
template <class K>
void dequantized_product(int device, const DeviceFactor& F, const typename K::Code* q, const float* q_scale,
                         std::int64_t rows, std::int64_t d_out, const Epilogue& epilogue, const TensorView& out,
                         std::int64_t out_row_stride, cudaStream_t stream) {
  DeviceBuffer sums = scratch<typename K::Sum>(device, rows * F.n_pad, stream);
  K::gemm(device, F.n_pad, rows, F.k_pad, static_cast<const typename K::Code*>(F.codes), q,
          sums.as<typename K::Sum>(), stream);
  const float* bias = epilogue.bias ? static_cast<const float*>(epilogue.bias->data()) : nullptr;
  const std::int64_t bias_stride = epilogue.bias ? epilogue.bias->stride(0) : 0;
  K::dequantize(sums.as<typename K::Sum>(), F.n_pad, q_scale, F.scales, rows, d_out, bias, bias_stride,
                epilogue.activation, static_cast<float*>(out.data()), out_row_stride, stream);
}

template <class K>
void sketched(const detail::QuantizedMatmulProblem& p, int device, cudaStream_t stream) {
  using Code = typename K::Code;
  using Sum = typename K::Sum;
  const std::shared_ptr<const DeviceFactor> S = device_factor(p.S, device);
  const std::shared_ptr<const DeviceFactor> U = device_factor(p.U, device);
  const std::int64_t rows = p.rows;

  // x → codes (leading dimension S.k_pad, the padding zeros).
  DeviceBuffer xq = scratch<Code>(device, rows * S->k_pad, stream);
  DeviceBuffer x_scale = scratch<float>(device, rows, stream);
  K::quantize(static_cast<const float*>(p.x.data()), row_layout_of(p.x), rows, p.d_in, xq.as<Code>(), S->k_pad,
              x_scale.as<float>(), stream, 1.0f);

  // Sums of x·S (rows × S.n_pad), then σ of their dequantized values requantized per row, with
  // the epilogue's scale folded into the row scales (as on the CPU).
  DeviceBuffer sums = scratch<Sum>(device, rows * S->n_pad, stream);
  K::gemm(device, S->n_pad, rows, S->k_pad, static_cast<const Code*>(S->codes), xq.as<Code>(), sums.as<Sum>(), stream);
  DeviceBuffer zq = scratch<Code>(device, rows * U->k_pad, stream);
  DeviceBuffer z_scale = scratch<float>(device, rows, stream);
  K::requantize(sums.as<Sum>(), S->n_pad, x_scale.as<float>(), S->scales, rows, p.rank, p.epilogue.inner_activation,
                static_cast<float>(p.epilogue.scale), zq.as<Code>(), U->k_pad, z_scale.as<float>(), stream);

  // Sums of zq·U, dequantized with bias and activation into out.
  dequantized_product<K>(device, *U, zq.as<Code>(), z_scale.as<float>(), rows, p.d_out, p.epilogue, p.out,
                         p.out_row_stride, stream);
}

template <class K>
void dense(const detail::QuantizedDenseProblem& p, int device, cudaStream_t stream) {
  using Code = typename K::Code;
  const std::shared_ptr<const DeviceFactor> W = device_factor(p.W, device);
  // x → codes (leading dimension W.k_pad), the epilogue's scale folded in; then the last step.
  DeviceBuffer xq = scratch<Code>(device, p.rows * W->k_pad, stream);
  DeviceBuffer x_scale = scratch<float>(device, p.rows, stream);
  K::quantize(static_cast<const float*>(p.x.data()), row_layout_of(p.x), p.rows, p.d_in, xq.as<Code>(), W->k_pad,
              x_scale.as<float>(), stream, static_cast<float>(p.epilogue.scale));
  dequantized_product<K>(device, *W, xq.as<Code>(), x_scale.as<float>(), p.rows, p.d_out, p.epilogue, p.out,
                         p.out_row_stride, stream);
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

void quantized_sketched_matmul_on_device(const detail::QuantizedMatmulProblem& p) {
  const int device = p.x.device().index;
  DeviceGuard guard(device);
  if (p.S.format() == QuantFormat::fp8_e4m3) require_fp8_device(device);
  if (p.rows == 0 || p.d_out == 0) return;
  const cudaStream_t stream = current_stream();
  switch (p.S.format()) {
    case QuantFormat::int8: return sketched<Int8Kernels>(p, device, stream);
    case QuantFormat::fp8_e4m3: return sketched<Fp8Kernels>(p, device, stream);
  }
}

void quantized_matmul_on_device(const detail::QuantizedDenseProblem& p) {
  if (p.W.format() != QuantFormat::int8) {
    throw device_error(std::string(quant_format_info(p.W.format()).dense_op) +
                       ": the CUDA backend has no full-rank kernel of this format");
  }
  const int device = p.x.device().index;
  DeviceGuard guard(device);
  if (p.rows == 0 || p.d_out == 0) return;
  dense<Int8Kernels>(p, device, current_stream());
}

}  // namespace sketchcore::cuda
