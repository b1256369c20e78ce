// The int8 path's own kernels (int8_kernels.cuh). UNVERIFIED on a GPU (see the header).
#include "int8_kernels.cuh"

#include <algorithm>
#include <cfloat>

#include "cuda_common.cuh"
#include "detail/activations.hpp"
#include "launch.cuh"
#include "row_reduce.cuh"

namespace sketchcore::cuda {

namespace {

/// The CPU's quantization of one value of a row with a finite, non-zero maximum.
__device__ __forceinline__ std::int8_t quantize(float v, float inverse) {
  return static_cast<std::int8_t>(__float2int_rn(fminf(127.0f, fmaxf(-127.0f, v * inverse))));
}

/// Writes row `dst` (ld values) from `src(j)` for j < cols, given the row's maximum; returns its scale.
template <class Source>
__device__ float write_quantized_row(const RowMax& m, Source src, std::int64_t cols, std::int8_t* dst,
                                     std::int64_t ld) {
  const bool zero = !m.finite || m.max_abs == 0.0f;
  // Below 2^-64 the values and the maximum are scaled by 2^64 first (exactly), as on the CPU:
  // 127.0f / max overflows for the smallest maxima, and 0 · inf is NaN.
  const float boost = tiny_row_boost(m.max_abs);
  const float inverse = zero ? 0.0f : 127.0f / (m.max_abs * boost);
  for (std::int64_t j = threadIdx.x; j < ld; j += blockDim.x) {
    dst[j] = (zero || j >= cols) ? std::int8_t{0} : quantize(src(j) * boost, inverse);
  }
  return m.finite ? m.max_abs / 127.0f : __int_as_float(0x7fc00000);  // NaN for a non-finite row
}

__global__ void quantize_rows_kernel(const float* x, RowLayout layout, std::int64_t rows, std::int64_t cols,
                                     std::int8_t* dst, std::int64_t ld, float* scale, float scale_factor) {
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* row = x + row_offset(layout, r);
    float max_abs = 0.0f;
    bool finite = true;
    for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float v = row[j * layout.col_stride];
      max_abs = fmaxf(max_abs, fabsf(v));
      finite = finite && is_finite(v);
    }
    const RowMax m = block_row_max(max_abs, finite);
    const float s = write_quantized_row(m, [&](std::int64_t j) { return row[j * layout.col_stride]; }, cols,
                                        dst + r * ld, ld);
    if (threadIdx.x == 0) scale[r] = s * scale_factor;
  }
}

template <class Act>
__global__ void requantize_rows_kernel(std::int32_t* acc, std::int64_t ld_acc, const float* row_scale,
                                       const float* col_scale, std::int64_t rows, std::int64_t cols, Act sigma,
                                       float scale_factor, std::int8_t* dst, std::int64_t ld_dst, float* dst_scale) {
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    // The row's z replaces its sums, as float32 bits in the int32 slots: each thread rewrites,
    // then rereads, its own columns.
    std::int32_t* sums = acc + r * ld_acc;
    const float rs = row_scale[r];
    float max_abs = 0.0f;
    bool finite = true;
    for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float v = sigma(static_cast<float>(sums[j]) * (rs * col_scale[j]));
      sums[j] = __float_as_int(v);
      max_abs = fmaxf(max_abs, fabsf(v));
      finite = finite && is_finite(v);
    }
    const RowMax m = block_row_max(max_abs, finite);
    const float s = write_quantized_row(m, [&](std::int64_t j) { return __int_as_float(sums[j]); }, cols,
                                        dst + r * ld_dst, ld_dst);
    if (threadIdx.x == 0) dst_scale[r] = s * scale_factor;
  }
}

template <class Act>
__global__ void dequantize_rows_kernel(const std::int32_t* acc, std::int64_t ld_acc, const float* row_scale,
                                       const float* col_scale, std::int64_t rows, std::int64_t cols,
                                       const float* bias, std::int64_t bias_stride, Act act, float* out,
                                       std::int64_t ld_out) {
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const std::int32_t* sums = acc + r * ld_acc;
    float* row = out + r * ld_out;
    const float rs = row_scale[r];
    for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      float v = static_cast<float>(sums[j]) * (rs * col_scale[j]);
      if (bias) v += bias[j * bias_stride];
      row[j] = act(v);
    }
  }
}

/// One block per row, at most 2^16 blocks (the kernels stride over the rest).
unsigned row_blocks(std::int64_t rows) {
  return static_cast<unsigned>(std::clamp<std::int64_t>(rows, 1, std::int64_t{1} << 16));
}

}  // namespace

void quantize_rows_int8(const float* x, const RowLayout& layout, std::int64_t rows, std::int64_t cols,
                        std::int8_t* dst, std::int64_t ld, float* scale, cudaStream_t stream, float scale_factor) {
  if (rows == 0) return;
  quantize_rows_kernel<<<row_blocks(rows), kThreads, 0, stream>>>(x, layout, rows, cols, dst, ld, scale,
                                                                  scale_factor);
  check(cudaGetLastError(), "quantize_rows_kernel");
}

void requantize_rows_int8(std::int32_t* acc, std::int64_t ld_acc, const float* row_scale, const float* col_scale,
                          std::int64_t rows, std::int64_t cols, Activation sigma, float scale_factor,
                          std::int8_t* dst, std::int64_t ld_dst, float* dst_scale, cudaStream_t stream) {
  if (rows == 0) return;
  detail::visit_activation(sigma, [&](auto act, auto) {
    requantize_rows_kernel<<<row_blocks(rows), kThreads, 0, stream>>>(acc, ld_acc, row_scale, col_scale, rows, cols,
                                                                      act, scale_factor, dst, ld_dst, dst_scale);
  });
  check(cudaGetLastError(), "requantize_rows_kernel");
}

void dequantize_rows_int8(const std::int32_t* acc, std::int64_t ld_acc, const float* row_scale,
                          const float* col_scale, std::int64_t rows, std::int64_t cols, const float* bias,
                          std::int64_t bias_stride, Activation act, float* out, std::int64_t ld_out,
                          cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  detail::visit_activation(act, [&](auto f, auto) {
    dequantize_rows_kernel<<<row_blocks(rows), kThreads, 0, stream>>>(acc, ld_acc, row_scale, col_scale, rows, cols,
                                                                      bias, bias_stride, f, out, ld_out);
  });
  check(cudaGetLastError(), "dequantize_rows_kernel");
}

}  // namespace sketchcore::cuda
