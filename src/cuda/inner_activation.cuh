// The CUDA backend's kernels for an inner (bottleneck) activation σ on the intermediate Z = x·Sp
// of a sketched GEMM (CoLA-style layers): σ(Z) before the second product, and the backward's
// (G·Upᵀ) ⊙ σ′(Z) from the saved pre-activation Z. Own kernels, not cuBLASLt epilogues: the
// forward's σ must leave the saved Z untouched (cuBLASLt's *_AUX epilogues store the
// pre-activation but exist only for relu and tanh-GELU), and the backward multiplies by σ′ of
// a matrix other than the GEMM's output.
//
// UNVERIFIED: compiled by nvcc (sm_90) but never run on a GPU; stays behind the unverified-CUDA
// gate until a device run passes tests/core/test_inner_activation.py's CUDA cases.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "sketchcore/epilogue.hpp"

namespace sketchcore::cuda {

/// dst(r, c) = σ(src(r, c)) over rows × cols (row-major, leading dimensions ld_src and ld_dst;
/// dst may be src with the same ld, in place), computed in float (double for double).
template <class T>
void inner_activation_forward(Activation sigma, const T* src, std::int64_t ld_src, T* dst, std::int64_t ld_dst,
                              std::int64_t rows, std::int64_t cols, cudaStream_t stream);

/// g(r, c) = g(r, c) · σ′(z(r, c)) over rows × cols (row-major, leading dimensions ld_z, ld_g).
template <class T>
void inner_activation_backward(Activation sigma, const T* z, std::int64_t ld_z, T* g, std::int64_t ld_g,
                               std::int64_t rows, std::int64_t cols, cudaStream_t stream);

}  // namespace sketchcore::cuda
