// Inner-activation kernels (inner_activation.cuh): one grid-stride pass over a rows × cols
// block, the activation and its derivative from the one table both backends share
// (detail/activations.hpp). UNVERIFIED on a GPU (see the header).
#include "inner_activation.cuh"

#include "cuda_common.cuh"
#include "detail/activations.hpp"
#include "launch.cuh"

namespace sketchcore::cuda {

namespace {

template <class T, class Act>
__global__ void inner_forward_kernel(const T* src, std::int64_t ld_src, T* dst, std::int64_t ld_dst,
                                     std::int64_t rows, std::int64_t cols, Act act) {
  using E = Element<T>;
  for (std::int64_t i = first_index(); i < rows * cols; i += index_step()) {
    const std::int64_t r = i / cols, c = i - r * cols;
    dst[r * ld_dst + c] = E::store(act(E::load(src[r * ld_src + c])));
  }
}

template <class T, class Grad>
__global__ void inner_backward_kernel(const T* z, std::int64_t ld_z, T* g, std::int64_t ld_g, std::int64_t rows,
                                      std::int64_t cols, Grad grad) {
  using E = Element<T>;
  for (std::int64_t i = first_index(); i < rows * cols; i += index_step()) {
    const std::int64_t r = i / cols, c = i - r * cols;
    T& gi = g[r * ld_g + c];
    gi = E::store(E::load(gi) * grad(E::load(z[r * ld_z + c])));
  }
}

}  // namespace

template <class T>
void inner_activation_forward(Activation sigma, const T* src, std::int64_t ld_src, T* dst, std::int64_t ld_dst,
                              std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  detail::visit_activation(sigma, [&](auto act, auto) {
    inner_forward_kernel<T><<<blocks_for(rows * cols), kThreads, 0, stream>>>(src, ld_src, dst, ld_dst, rows, cols,
                                                                              act);
  });
  check(cudaGetLastError(), "inner_forward_kernel");
}

template <class T>
void inner_activation_backward(Activation sigma, const T* z, std::int64_t ld_z, T* g, std::int64_t ld_g,
                               std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0 || sigma == Activation::none) return;
  detail::visit_activation(sigma, [&](auto, auto grad) {
    inner_backward_kernel<T><<<blocks_for(rows * cols), kThreads, 0, stream>>>(z, ld_z, g, ld_g, rows, cols, grad);
  });
  check(cudaGetLastError(), "inner_backward_kernel");
}

#define SKETCHCORE_INSTANTIATE(T)                                                                                 \
  template void inner_activation_forward<T>(Activation, const T*, std::int64_t, T*, std::int64_t, std::int64_t, \
                                            std::int64_t, cudaStream_t);                                        \
  template void inner_activation_backward<T>(Activation, const T*, std::int64_t, T*, std::int64_t, std::int64_t, \
                                             std::int64_t, cudaStream_t);

SKETCHCORE_INSTANTIATE(__half)
SKETCHCORE_INSTANTIATE(__nv_bfloat16)
SKETCHCORE_INSTANTIATE(float)
SKETCHCORE_INSTANTIATE(double)

#undef SKETCHCORE_INSTANTIATE

}  // namespace sketchcore::cuda
