// What the core knows about the CUDA backend without including any CUDA header.
// Defined in src/cuda/ when the backend is compiled, else inline below.
#pragma once

#include <string>

#include "sketchcore/errors.hpp"
#include "sketchcore/memory.hpp"

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
#else
inline bool cuda_compiled() noexcept { return false; }
inline int cuda_runtime_version() noexcept { return 0; }
inline int cuda_devices() noexcept { return 0; }
inline MemoryStats cuda_pool_stats(int) { return {}; }
inline void cuda_pool_reset_peak(int) {}
inline void cuda_pool_empty_cache(int) {}
#endif

}  // namespace sketchcore::detail
