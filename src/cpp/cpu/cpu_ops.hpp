// The CPU backend's operations, each called by CpuBackend (cpu_backend.cpp) on a problem the
// core has validated.
#pragma once

#include <cstdint>

#include "detail/backend.hpp"

namespace sketchcore::detail {

/// Forward of the sketched GEMM (sketched_matmul_cpu.cpp).
void cpu_sketched_matmul(const SketchedMatmulProblem& problem);
/// Backward of the sketched GEMM (sketched_matmul_cpu.cpp).
void cpu_sketched_matmul_backward(const SketchedMatmulProblem& problem, const SketchedMatmulGradients& grads);
/// A block of a sketch operator, materialized (sketch_cpu.cpp).
void cpu_sketch_to_dense(const SketchOperator& op, const TensorView& out, std::int64_t row0, std::int64_t col0);
/// A sketch applied to a batch of matrices (sketch_cpu.cpp).
void cpu_sketch_apply(const SketchApplyProblem& problem);

}  // namespace sketchcore::detail
