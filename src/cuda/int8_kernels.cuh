// The CUDA backend's kernels around the int8 GEMMs of int8_sketched_matmul: per-row quantization
// of the float32 input, the fused dequantize → σ → requantize step between the two products, and
// the final dequantize + bias + activation epilogue. One block per row (a row's absolute maximum
// is a block reduction), columns over the block's threads. The formulas are the CPU's
// (cpu/int8_gemm.cpp), operation for operation: q = clip(round_half_even(v · (127/max|v|)), ±127)
// in float32, dequantized values float(sum) · (row scale · column scale), so the int32 sums (exact
// on both) give the same floats up to the activations' own last bits.
//
// UNVERIFIED: compiled by nvcc (sm_90) but never run on a GPU; behind the gated path
// cuda_int8_factors until a device run passes tests/gpu/test_gpu_int8.py.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels.cuh"
#include "sketchcore/epilogue.hpp"

namespace sketchcore::cuda {

/// Quantizes row i of x (`layout`, `cols` float32 values) into dst + i·ld (int8; zeros from
/// `cols` up to ld) with scale[i] = (max|x_i|/127) · scale_factor (0 for an all-zero row, whose
/// values are zeros; NaN for a row with a non-finite value, whose values are zeros).
void quantize_rows_int8(const float* x, const RowLayout& layout, std::int64_t rows, std::int64_t cols,
                        std::int8_t* dst, std::int64_t ld, float* scale, cudaStream_t stream,
                        float scale_factor = 1.0f);

/// For the int32 sums `acc` (rows × cols, leading dimension ld_acc): z = σ(float(acc) ·
/// (row_scale[i] · col_scale[j])), then z's rows quantized as quantize_rows_int8 does into dst
/// (leading dimension ld_dst ≥ cols, zeros past cols) with dst_scale[i] = (max|z_i|/127) ·
/// scale_factor. Overwrites acc with z's float32 bits (its scratch).
void requantize_rows_int8(std::int32_t* acc, std::int64_t ld_acc, const float* row_scale, const float* col_scale,
                          std::int64_t rows, std::int64_t cols, Activation sigma, float scale_factor,
                          std::int8_t* dst, std::int64_t ld_dst, float* dst_scale, cudaStream_t stream);

/// out(i, j) = act(float(acc(i, j)) · (row_scale[i] · col_scale[j]) + bias[j · bias_stride])
/// for i < rows, j < cols (bias null: none), out row-major with leading dimension ld_out.
void dequantize_rows_int8(const std::int32_t* acc, std::int64_t ld_acc, const float* row_scale,
                          const float* col_scale, std::int64_t rows, std::int64_t cols, const float* bias,
                          std::int64_t bias_stride, Activation act, float* out, std::int64_t ld_out,
                          cudaStream_t stream);

}  // namespace sketchcore::cuda
