// The CUDA backend's kernels around the fp8 GEMMs of fp8_sketched_matmul: per-row e4m3
// quantization of the float32 input, the fused dequantize → σ → requantize step between the two
// products, and the final dequantize + bias + activation epilogue. One block per row (a row's
// absolute maximum is a block reduction), columns over the block's threads. A row's codes are
// float_to_e4m3(v · (448/max|v|)) (fp8_matmul.hpp: round to nearest even, saturating), its scale
// max|v|/448; a dequantized value is sum · (row scale · column scale).
//
// UNVERIFIED: compiled by nvcc (sm_90) but never run on a GPU; behind the gated path
// cuda_fp8_factors until a device run passes tests/gpu/test_gpu_fp8.py.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels.cuh"
#include "sketchcore/epilogue.hpp"

namespace sketchcore::cuda {

/// Quantizes row i of x (`layout`, `cols` float32 values) into dst + i·ld (e4m3 codes; zeros
/// from `cols` up to ld) with scale[i] = max|x_i|/448 (0 for an all-zero row, whose codes are
/// zeros; NaN for a row with a non-finite value, whose codes are zeros).
void quantize_rows_fp8(const float* x, const RowLayout& layout, std::int64_t rows, std::int64_t cols,
                       std::uint8_t* dst, std::int64_t ld, float* scale, cudaStream_t stream);

/// For the float32 sums `acc` (rows × cols, leading dimension ld_acc): z = σ(acc(i, j) ·
/// (row_scale[i] · col_scale[j])), then z's rows quantized as quantize_rows_fp8 does into dst
/// (leading dimension ld_dst ≥ cols, zeros past cols) with dst_scale[i] = (max|z_i|/448) ·
/// scale_factor. Overwrites acc with z (its scratch).
void requantize_rows_fp8(float* acc, std::int64_t ld_acc, const float* row_scale, const float* col_scale,
                         std::int64_t rows, std::int64_t cols, Activation sigma, float scale_factor, std::uint8_t* dst,
                         std::int64_t ld_dst, float* dst_scale, cudaStream_t stream);

/// out(i, j) = act(acc(i, j) · (row_scale[i] · col_scale[j]) + bias[j · bias_stride]) for
/// i < rows, j < cols (bias null: none), out row-major with leading dimension ld_out.
void dequantize_rows_fp8(const float* acc, std::int64_t ld_acc, const float* row_scale, const float* col_scale,
                         std::int64_t rows, std::int64_t cols, const float* bias, std::int64_t bias_stride,
                         Activation act, float* out, std::int64_t ld_out, cudaStream_t stream);

}  // namespace sketchcore::cuda
