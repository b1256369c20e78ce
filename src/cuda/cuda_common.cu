#include "cuda_common.cuh"

#include <string>

#include "sketchcore/errors.hpp"

namespace sketchcore::cuda {

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  throw cuda_error(std::string("sketchcore: ") + what + " failed: " + cudaGetErrorName(status) + " (" +
                   cudaGetErrorString(status) + ")");
}

DeviceGuard::DeviceGuard(int device) {
  check(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != device) check(cudaSetDevice(device), "cudaSetDevice");
}

DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_ && previous_ >= 0) cudaSetDevice(previous_);
}

}  // namespace sketchcore::cuda
