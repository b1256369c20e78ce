// The block-wide reduction of the CUDA quantizing kernels (int8_kernels.cu, fp8_kernels.cu): one
// block per row, a row's largest |value| and whether all its values are finite, which the row's
// scale comes from.
//
// UNVERIFIED: compiled by nvcc (sm_90) but never run on a GPU (the kernels that use it are behind
// the gated paths cuda_int8_factors and cuda_fp8_factors).
#pragma once

#include <cfloat>

#include "kernels.cuh"

namespace sketchcore::cuda {

/// The largest |value| of a row and whether every value was finite.
struct RowMax {
  float max_abs;
  bool finite;
};

/// The row's RowMax from each thread's partial one, in every thread of the block (kThreads
/// threads, full warps). Every thread of the block must call it (it synchronises twice).
__device__ __forceinline__ RowMax block_row_max(float max_abs, bool finite) {
  constexpr int kWarps = kThreads / 32;
  __shared__ float warp_max[kWarps];
  __shared__ int warp_finite[kWarps];
  for (int offset = 16; offset > 0; offset /= 2) {
    max_abs = fmaxf(max_abs, __shfl_xor_sync(0xffffffffu, max_abs, offset));
  }
  const bool all_finite = __all_sync(0xffffffffu, finite);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  if (lane == 0) {
    warp_max[warp] = max_abs;
    warp_finite[warp] = all_finite;
  }
  __syncthreads();
  RowMax result{0.0f, true};
  for (int w = 0; w < kWarps; ++w) {
    result.max_abs = fmaxf(result.max_abs, warp_max[w]);
    result.finite = result.finite && warp_finite[w] != 0;
  }
  __syncthreads();  // the shared slots are reused by the block's next row
  return result;
}

/// |v| ≤ FLT_MAX: false for infinities and NaNs (fmaxf drops NaNs, so they are looked for apart).
__device__ __forceinline__ bool is_finite(float v) { return fabsf(v) <= FLT_MAX; }

/// The exact power of two a row's values and maximum are multiplied by before range / max is
/// taken, as on the CPU (cpu/int8_gemm.hpp's int8_tiny_row_boost): 2^64 below 2^-64, else 1.
__device__ __forceinline__ float tiny_row_boost(float max_abs) { return max_abs < 0x1p-64f ? 0x1p64f : 1.0f; }

}  // namespace sketchcore::cuda
