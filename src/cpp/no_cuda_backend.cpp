// A build without the CUDA backend: there is none to dispatch to. Linked instead of src/cuda/
// (cmake/SketchcoreCuda.cmake), so no core file needs a CUDA #if.
#include "detail/backend.hpp"

namespace sketchcore::detail {

const Backend* cuda_backend() noexcept { return nullptr; }

}  // namespace sketchcore::detail
