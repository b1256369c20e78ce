// What the core knows about the CUDA backend without including any CUDA header.
// Defined in src/cuda/ when the backend is compiled, else inline below.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sketchcore/errors.hpp"
#include "sketchcore/memory.hpp"
#include "sketchcore/sketch.hpp"
#include "sketchcore/tensor.hpp"

namespace sketchcore::detail {

class Backend;

#if defined(SKETCHCORE_WITH_CUDA)
bool cuda_compiled() noexcept;
int cuda_runtime_version() noexcept;
int cuda_devices() noexcept;
/// The CUDA backend (compiled in).
const Backend& cuda_backend();
MemoryStats cuda_pool_stats(int device);
void cuda_pool_reset_peak(int device);
void cuda_pool_empty_cache(int device);
/// sketch_to_dense into a validated `out` on a CUDA device.
void cuda_sketch_to_dense(const SketchOperator& op, const TensorView& out, std::int64_t row0, std::int64_t col0);
/// sketch_apply on a CUDA device: out[b] = S·a[b] (or the other side / transpose) for each
/// pair of validated, non-overlapping 2-D views.
void cuda_sketch_apply(const SketchOperator& op, const std::vector<TensorView>& a, const std::vector<TensorView>& out,
                       Side side, bool transpose);
#else
inline bool cuda_compiled() noexcept { return false; }
inline int cuda_runtime_version() noexcept { return 0; }
inline int cuda_devices() noexcept { return 0; }
inline MemoryStats cuda_pool_stats(int) { return {}; }
inline void cuda_pool_reset_peak(int) {}
inline void cuda_pool_empty_cache(int) {}
// Never reached: without the backend, CUDA arrays are refused before dispatch.
inline void cuda_sketch_to_dense(const SketchOperator&, const TensorView&, std::int64_t, std::int64_t) {
  throw device_error("sketch: this build of sketchcore has no CUDA backend");
}
inline void cuda_sketch_apply(const SketchOperator&, const std::vector<TensorView>&, const std::vector<TensorView>&,
                              Side, bool) {
  throw device_error("sketch: this build of sketchcore has no CUDA backend");
}
#endif

}  // namespace sketchcore::detail
