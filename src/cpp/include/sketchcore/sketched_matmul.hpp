/// @file sketched_matmul.hpp
/// @brief The sketched GEMM: y = act(scale · Σ_t (x·S_t)·U_t + bias).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "sketchcore/epilogue.hpp"
#include "sketchcore/export.hpp"
#include "sketchcore/tensor.hpp"

namespace sketchcore {

/// Checks the operands of sketched_matmul and returns the shape of its result,
/// `x.shape[:-1] + (d_out,)`.
///
/// Accepted operands: `x` of shape (..., d_in) with at least one dimension, and either
/// `S` (d_in, k) with `U` (k, d_out), or `S` (T, d_in, k) with `U` (T, k, d_out); all of the
/// same dtype on the same device: float16, bfloat16 (float32 accumulation), float32 or float64,
/// on the CPU or a CUDA device.
/// @throws shape_error  for a wrong number of dimensions or a mismatching extent
/// @throws dtype_error  for an unsupported or mismatching element type
/// @throws device_error for operands on different devices
SKETCHCORE_API std::vector<std::int64_t> sketched_matmul_output_shape(const TensorView& x,
                                                                      const TensorView& S,
                                                                      const TensorView& U);

/// Computes `out = act(scale · Σ_t σ(x·S_t)·U_t + bias)` as one pair of GEMMs:
/// `Σ_t σ(x·S_t)·U_t = σ(x · [S_1 … S_T]) · [U_1; …; U_T]` (inner width r = T·k), where σ is
/// `epilogue.inner_activation` (identity by default), applied to each chunk of the intermediate
/// right after the first GEMM.
///
/// Layouts: any strides are accepted. Matrices whose rows (or columns) have unit stride
/// and whose leading dimensions of `x`/`out` collapse into one row stride are used in
/// place; other layouts are packed into a temporary first (one extra pass over that
/// operand). `S` with T > 1 is always packed into [S_1 … S_T] (d_in × r, small).
///
/// `out` must have shape sketched_matmul_output_shape(x, S, U), the operands' dtype and
/// device, no two elements at the same address, and must not overlap any input.
/// A zero-size batch or d_out = 0 writes nothing; k = 0, T = 0 or d_in = 0 gives
/// `out = act(bias)` (an empty sum).
///
/// Thread safety: concurrent calls are safe as long as their outputs do not overlap.
/// @throws shape_error  as sketched_matmul_output_shape, and for a wrong `out` or `epilogue.bias`
/// @throws dtype_error  as sketched_matmul_output_shape, and for a wrong `out` or `epilogue.bias`
/// @throws device_error as sketched_matmul_output_shape, and for a wrong `out` or `epilogue.bias`
/// @throws std::invalid_argument for a non-finite `epilogue.scale`
SKETCHCORE_API void sketched_matmul(const TensorView& x, const TensorView& S, const TensorView& U,
                                    const TensorView& out, const Epilogue& epilogue = {});

/// As sketched_matmul, and also writes the intermediate Z = x · [S_1 … S_T] (before the inner
/// activation: the backward recomputes σ(Z) and σ′(Z) from it) into
/// `intermediate` (shape x.shape[:-1] + (T·k,), row-major rows: unit last stride and
/// leading dimensions that collapse), which sketched_matmul_backward reuses.
/// @throws shape_error for a wrong or non-row-major `intermediate`, as sketched_matmul otherwise
SKETCHCORE_API void sketched_matmul(const TensorView& x, const TensorView& S, const TensorView& U,
                                    const TensorView& out, const Epilogue& epilogue,
                                    const TensorView& intermediate);

/// A half-open range [begin, end) of the T terms; `end = -1` means "up to T".
struct TermRange {
  std::int64_t begin = 0;  ///< first term
  std::int64_t end = -1;   ///< one past the last term, or -1 for T
};

/// Gradients to compute in sketched_matmul_backward; an empty one is not computed.
///
/// `S_terms` / `U_terms` restrict dS / dU to some of the terms (a layer whose S and U
/// each mix learnable and fixed terms, such as Panther's, needs only half of each): the
/// destination then has shape (end − begin, d_in, k) / (end − begin, k, d_out), and only
/// those columns of the dS GEMM (rows of the dU GEMM) are computed. A 2-D S or U (T = 1)
/// takes only the whole range.
struct SketchedMatmulGradients {
  std::optional<TensorView> x;     ///< dL/dx, shape of x
  std::optional<TensorView> S;     ///< dL/dS_t for t in S_terms; shape of S, or (terms, d_in, k)
  std::optional<TensorView> U;     ///< dL/dU_t for t in U_terms; shape of U, or (terms, k, d_out)
  std::optional<TensorView> bias;  ///< dL/dbias, shape (d_out,); needs epilogue.bias
  TermRange S_terms;               ///< terms whose dS is computed (default: all)
  TermRange U_terms;               ///< terms whose dU is computed (default: all)
};

/// Backward of y = dropout(act(scale · σ(Z)·Up + bias)), Z = x·Sp, given dL/dy, with
/// A = σ(Z) recomputed from the saved Z (A = Z without an inner activation):
///   H = scale·A·Up + bias (recomputed, one GEMM, only when the activation needs it),
///   G = dL/dy ⊙ keep/(1 − p) ⊙ act′(H) with the dropout mask regenerated from
///   epilogue.seed, D = scale·(G·Upᵀ) ⊙ σ′(Z), then dbias = Σ_rows G, dUp = scale·Aᵀ·G,
///   dSp = xᵀ·D, dx = D·Spᵀ — only the requested ones, in row chunks with pooled
///   temporaries. `intermediate` is the Z written by the forward.
/// Derivatives at the kinks follow PyTorch: relu′(0) = 0.
/// @throws shape_error  for operands whose shapes do not fit
/// @throws dtype_error  for operands whose dtypes do not fit
/// @throws device_error for operands on different devices
SKETCHCORE_API void sketched_matmul_backward(const TensorView& grad_out, const TensorView& x, const TensorView& S,
                                             const TensorView& U, const TensorView& intermediate,
                                             const Epilogue& epilogue, const SketchedMatmulGradients& grads);

}  // namespace sketchcore
