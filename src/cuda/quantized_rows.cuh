// The row kernels of the quantized GEMMs (quantized_cuda.cu), written once over a format's Codec:
// per-row quantization of the float32 input, the fused dequantize → σ → requantize step between the
// two products, and the final dequantize + bias + activation epilogue. One block per row (a row's
// absolute maximum is a block reduction), columns over the block's threads. A row's codes are
// Codec::encode(v, max_value/max|v|), its scale max|v|/max_value; a dequantized value is
// Codec::value(sum) · (row scale · column scale). Each format's .cu (int8_kernels.cu,
// fp8_kernels.cu) defines its Codec and instantiates these in its named launchers:
//   Code                 the code type (std::int8_t, std::uint8_t)
//   Sum                  the GEMM's sum type (std::int32_t, float)
//   kMax                 the largest code value (127, 448)
//   encode(v, inverse)   the code of v · inverse (a device function)
//   value(sum)           a sum as float; store(z)/load(slot): z kept in a sum's slot (its scratch)
//
// UNVERIFIED: compiled by nvcc (sm_90) but never run on a GPU; behind the gated paths
// cuda_int8_factors and cuda_fp8_factors until a device run passes tests/gpu/.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "cuda_common.cuh"
#include "detail/activations.hpp"
#include "kernels.cuh"
#include "launch.cuh"
#include "row_reduce.cuh"
#include "sketchcore/epilogue.hpp"

namespace sketchcore::cuda::quantized_rows {

/// Writes row `dst` (ld codes) from `src(j)` for j < cols, given the row's maximum; returns its scale.
template <class Codec, class Source>
__device__ float write_quantized_row(const RowMax& m, Source src, std::int64_t cols, typename Codec::Code* dst,
                                     std::int64_t ld) {
  const bool zero = !m.finite || m.max_abs == 0.0f;
  // Below 2^-64 the values and the maximum are scaled by 2^64 first (exactly), as on the CPU:
  // kMax / max overflows for the smallest maxima, and 0 · inf is NaN.
  const float boost = tiny_row_boost(m.max_abs);
  const float inverse = zero ? 0.0f : Codec::kMax / (m.max_abs * boost);
  for (std::int64_t j = threadIdx.x; j < ld; j += blockDim.x) {
    dst[j] = (zero || j >= cols) ? typename Codec::Code{0} : Codec::encode(src(j) * boost, inverse);
  }
  return m.finite ? m.max_abs / Codec::kMax : __int_as_float(0x7fc00000);  // NaN for a non-finite row
}

template <class Codec>
__global__ void quantize_kernel(const float* x, RowLayout layout, std::int64_t rows, std::int64_t cols,
                                typename Codec::Code* dst, std::int64_t ld, float* scale, float scale_factor) {
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
    const float s = write_quantized_row<Codec>(m, [&](std::int64_t j) { return row[j * layout.col_stride]; }, cols,
                                               dst + r * ld, ld);
    if (threadIdx.x == 0) scale[r] = s * scale_factor;
  }
}

template <class Codec, class Act>
__global__ void requantize_kernel(typename Codec::Sum* acc, std::int64_t ld_acc, const float* row_scale,
                                  const float* col_scale, std::int64_t rows, std::int64_t cols, Act sigma,
                                  float scale_factor, typename Codec::Code* dst, std::int64_t ld_dst,
                                  float* dst_scale) {
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    // The row's z replaces its sums (Codec::store): each thread rewrites, then rereads, its own columns.
    typename Codec::Sum* sums = acc + r * ld_acc;
    const float rs = row_scale[r];
    float max_abs = 0.0f;
    bool finite = true;
    for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float v = sigma(Codec::value(sums[j]) * (rs * col_scale[j]));
      sums[j] = Codec::store(v);
      max_abs = fmaxf(max_abs, fabsf(v));
      finite = finite && is_finite(v);
    }
    const RowMax m = block_row_max(max_abs, finite);
    const float s = write_quantized_row<Codec>(m, [&](std::int64_t j) { return Codec::load(sums[j]); }, cols,
                                               dst + r * ld_dst, ld_dst);
    if (threadIdx.x == 0) dst_scale[r] = s * scale_factor;
  }
}

template <class Codec, class Act>
__global__ void dequantize_kernel(const typename Codec::Sum* acc, std::int64_t ld_acc, const float* row_scale,
                                  const float* col_scale, std::int64_t rows, std::int64_t cols, const float* bias,
                                  std::int64_t bias_stride, Act act, float* out, std::int64_t ld_out) {
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const typename Codec::Sum* sums = acc + r * ld_acc;
    float* row = out + r * ld_out;
    const float rs = row_scale[r];
    for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      float v = Codec::value(sums[j]) * (rs * col_scale[j]);
      if (bias) v += bias[j * bias_stride];
      row[j] = act(v);
    }
  }
}

/// One block per row, at most 2^16 blocks (the kernels stride over the rest).
inline unsigned row_blocks(std::int64_t rows) {
  return static_cast<unsigned>(std::clamp<std::int64_t>(rows, 1, std::int64_t{1} << 16));
}

/// The launchers each format's named functions forward to (their contracts: int8_kernels.cuh, fp8_kernels.cuh).
template <class Codec>
void quantize(const float* x, const RowLayout& layout, std::int64_t rows, std::int64_t cols,
              typename Codec::Code* dst, std::int64_t ld, float* scale, cudaStream_t stream, float scale_factor) {
  if (rows == 0) return;
  quantize_kernel<Codec><<<row_blocks(rows), kThreads, 0, stream>>>(x, layout, rows, cols, dst, ld, scale,
                                                                    scale_factor);
  check(cudaGetLastError(), Codec::kQuantizeName);
}

template <class Codec>
void requantize(typename Codec::Sum* acc, std::int64_t ld_acc, const float* row_scale, const float* col_scale,
                std::int64_t rows, std::int64_t cols, Activation sigma, float scale_factor, typename Codec::Code* dst,
                std::int64_t ld_dst, float* dst_scale, cudaStream_t stream) {
  if (rows == 0) return;
  detail::visit_activation(sigma, [&](auto act, auto) {
    requantize_kernel<Codec><<<row_blocks(rows), kThreads, 0, stream>>>(acc, ld_acc, row_scale, col_scale, rows, cols,
                                                                        act, scale_factor, dst, ld_dst, dst_scale);
  });
  check(cudaGetLastError(), Codec::kRequantizeName);
}

template <class Codec>
void dequantize(const typename Codec::Sum* acc, std::int64_t ld_acc, const float* row_scale, const float* col_scale,
                std::int64_t rows, std::int64_t cols, const float* bias, std::int64_t bias_stride, Activation act,
                float* out, std::int64_t ld_out, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  detail::visit_activation(act, [&](auto f, auto) {
    dequantize_kernel<Codec><<<row_blocks(rows), kThreads, 0, stream>>>(acc, ld_acc, row_scale, col_scale, rows, cols,
                                                                        bias, bias_stride, f, out, ld_out);
  });
  check(cudaGetLastError(), Codec::kDequantizeName);
}

}  // namespace sketchcore::cuda::quantized_rows
