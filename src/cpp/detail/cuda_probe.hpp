// What the core knows about the CUDA backend without including any CUDA header.
// Defined in src/cuda/cuda_backend.cu when the backend is compiled, else inline below.
#pragma once

namespace sketchcore::detail {

#if defined(SKETCHCORE_WITH_CUDA)
bool cuda_compiled() noexcept;
int cuda_runtime_version() noexcept;
#else
inline bool cuda_compiled() noexcept { return false; }
inline int cuda_runtime_version() noexcept { return 0; }
#endif

}  // namespace sketchcore::detail
