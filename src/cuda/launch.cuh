// Launch shapes shared by the CUDA backend's kernels: 1-D grids of kThreads-thread blocks,
// walked with grid-stride loops so that any problem size fits a bounded grid.
#pragma once

#include <algorithm>
#include <cstdint>

namespace sketchcore::cuda {

constexpr int kThreads = 256;

/// Blocks for `n` work items (at least 1, at most 2^20; the kernels stride over the rest).
inline unsigned blocks_for(std::int64_t n) {
  const std::int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::clamp<std::int64_t>(blocks, 1, std::int64_t{1} << 20));
}

#if defined(__CUDACC__)
/// This thread's first work item and the grid's stride.
__device__ __forceinline__ std::int64_t first_index() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::int64_t index_step() { return static_cast<std::int64_t>(gridDim.x) * blockDim.x; }
#endif

}  // namespace sketchcore::cuda
