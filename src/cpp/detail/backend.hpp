// The private backend interface: the public entry points validate their arguments once
// and hand a checked problem to the backend of the operands' device.
#pragma once

#include <cstdint>

#include "sketchcore/epilogue.hpp"
#include "sketchcore/sketched_matmul.hpp"
#include "sketchcore/tensor.hpp"

namespace sketchcore::detail {

/// A validated sketched_matmul problem: shapes agree, dtypes and devices match, `out` is
/// writable without overlap. Extents are the flattened problem sizes.
struct SketchedMatmulProblem {
  const TensorView& x;  // (..., d_in)
  const TensorView& S;  // (d_in, k) or (T, d_in, k)
  const TensorView& U;  // (k, d_out) or (T, k, d_out)
  const TensorView& out;  // (..., d_out)
  const Epilogue& epilogue;
  std::int64_t rows;   // product of x's leading extents
  std::int64_t d_in;
  std::int64_t terms;  // T (1 for 2-D S)
  std::int64_t rank;   // k per term
  std::int64_t d_out;
  const TensorView* intermediate = nullptr;  // Z = x·Sp to save (forward) or reuse (backward)
};

/// One device's implementation of the operations.
class Backend {
 public:
  virtual ~Backend() = default;
  /// Computes a validated sketched_matmul problem (saving Z if problem.intermediate).
  virtual void sketched_matmul(const SketchedMatmulProblem& problem) const = 0;
  /// Computes the requested gradients of a validated problem (problem.out is dL/dy).
  virtual void sketched_matmul_backward(const SketchedMatmulProblem& problem,
                                        const SketchedMatmulGradients& grads) const = 0;
};

/// The CPU backend (always present).
const Backend& cpu_backend();

}  // namespace sketchcore::detail
