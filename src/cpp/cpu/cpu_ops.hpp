// The CPU backend's operations, each called by CpuBackend (cpu_backend.cpp) on a problem the
// core has validated.
#pragma once

#include <cstdint>

#include "detail/backend.hpp"

namespace sketchcore::detail {

/// The 16-bit factors of a float16 or bfloat16 problem whose S and U the CPU backend passes
/// widened (cpu_backend.cpp), for the products that a native 16-bit GEMM takes as they are
/// (cpu/gemm_bf16.hpp); null for other problems.
struct HalfFactors {
  const TensorView* S = nullptr;
  const TensorView* U = nullptr;
};

/// Forward of the sketched GEMM (sketched_matmul_cpu.cpp).
void cpu_sketched_matmul(const SketchedMatmulProblem& problem, HalfFactors half = {});
/// Backward of the sketched GEMM (sketched_matmul_backward_cpu.cpp).
void cpu_sketched_matmul_backward(const SketchedMatmulProblem& problem, const SketchedMatmulGradients& grads,
                                  HalfFactors half = {});
/// A block of a sketch operator, materialized (sketch_cpu.cpp).
void cpu_sketch_to_dense(const SketchOperator& op, const TensorView& out, std::int64_t row0, std::int64_t col0);
/// A sketch applied to a batch of matrices (sketch_cpu.cpp).
void cpu_sketch_apply(const SketchApplyProblem& problem);
/// Performer attention, forward (performer_forward_cpu.cpp) and backward
/// (performer_backward_cpu.cpp); every dtype (16-bit ones computed in float32).
void cpu_performer_attention(const PerformerProblem& problem);
void cpu_performer_attention_backward(const PerformerProblem& problem, const TensorView& grad_out,
                                      const PerformerGradients& grads);
/// The int8 sketched GEMM and the full-rank int8 GEMM (int8_matmul_cpu.cpp).
void cpu_int8_sketched_matmul(const QuantizedMatmulProblem& problem);
void cpu_int8_matmul(const QuantizedDenseProblem& problem);

}  // namespace sketchcore::detail
