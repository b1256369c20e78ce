// The CUDA backend's sketch, Performer and quantized operations, called by CudaBackend
// (cuda_backend.cu) on problems the core has validated (kernels and staging: cuda_sketch.cu, performer_*.cu).
#pragma once

#include <cstdint>

#include "detail/backend.hpp"

namespace sketchcore::cuda {

/// A block of a sketch operator materialized on the device of `out`.
void sketch_to_dense_on_device(const SketchOperator& op, const TensorView& out, std::int64_t row0,
                               std::int64_t col0);

/// A sketch applied to each matrix of a validated batch on the device of `problem.a`.
void sketch_apply_on_device(const detail::SketchApplyProblem& problem);

/// Performer attention on the device of `problem.q`, forward and backward (performer_*.cu).
void performer_attention_on_device(const detail::PerformerProblem& problem);
void performer_attention_backward_on_device(const detail::PerformerProblem& problem, const TensorView& grad_out,
                                            const PerformerGradients& grads);

/// quantized_sketched_matmul on the device of `problem.x`, with the kernels of the factors' format
/// (quantized_cuda.cu; gated per format: the caller checks).
/// @throws device_error for fp8 factors on a device of compute capability below 8.9
void quantized_sketched_matmul_on_device(const detail::QuantizedMatmulProblem& problem);
/// quantized_matmul (full rank) on the device of `problem.x` (quantized_cuda.cu; int8 only; gated: the caller checks).
void quantized_matmul_on_device(const detail::QuantizedDenseProblem& problem);

}  // namespace sketchcore::cuda
