// CUDA backend entry points. The kernels and cuBLASLt paths arrive with the CUDA backend
// issue; today this unit reports the runtime it was built against, which keeps the
// CUDA toolchain compiled and linked in every build where nvcc is present.
#include <cuda_runtime_api.h>

#include "detail/cuda_probe.hpp"

namespace sketchcore::detail {

bool cuda_compiled() noexcept { return true; }

int cuda_runtime_version() noexcept {
  int version = 0;
  if (cudaRuntimeGetVersion(&version) != cudaSuccess) return 0;
  return version;
}

}  // namespace sketchcore::detail
