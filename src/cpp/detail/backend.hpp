// The private backend interface. Every operation's public entry point validates its
// arguments once (in the core) and hands a checked problem to the backend of the operands'
// device; backends are peer folders (cpu/, ../cuda/) behind this one interface.
#pragma once

#include <cstdint>

#include "detail/quantized_storage.hpp"
#include "sketchcore/epilogue.hpp"
#include "sketchcore/errors.hpp"
#include "sketchcore/memory.hpp"
#include "sketchcore/performer.hpp"
#include "sketchcore/sketch.hpp"
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

/// A validated sketch application: `a` and `out` are 3-D (batch, rows, cols) views of the
/// same dtype and device, with no overlap; for Side::left each out[b] = op·a[b] (opᵀ when
/// `transpose`), for Side::right each out[b] = a[b]·op (or ·opᵀ).
struct SketchApplyProblem {
  const SketchOperator& op;
  const TensorView& a;
  const TensorView& out;
  Side side;
  bool transpose;
};

/// A validated performer_attention problem: q (B, H, L, d), k (B, H, S, d), v (B, H, S, e) and
/// `out` (B, H, L, e) of one dtype and device (for the backward `out` is the forward's output),
/// features (m, d) and the optional weights of q's dtype or float32; S = L when causal; `out`
/// (and the backward's gradients) writable without overlap.
struct PerformerProblem {
  const TensorView& q;
  const TensorView& k;
  const TensorView& v;
  const TensorView& features;
  const TensorView& out;
  const TensorView* key_weights;    // (B, S) or null
  const TensorView* value_weights;  // (B, H, S) or null
  PerformerOptions options;
  std::int64_t batch, heads, queries, keys, dim, value_dim, num_features;  // B, H, L, S, d, e, m
};


/// One kind of device's implementation of the operations and of its memory pool.
class Backend {
 public:
  virtual ~Backend() = default;
  /// Computes a validated sketched_matmul problem (saving Z if problem.intermediate).
  virtual void sketched_matmul(const SketchedMatmulProblem& problem) const = 0;
  /// Computes the requested gradients of a validated problem (problem.out is dL/dy).
  virtual void sketched_matmul_backward(const SketchedMatmulProblem& problem,
                                        const SketchedMatmulGradients& grads) const = 0;
  /// Writes S[row0 : row0 + out.rows, col0 : col0 + out.cols] into the validated 2-D `out`.
  virtual void sketch_to_dense(const SketchOperator& op, const TensorView& out, std::int64_t row0,
                               std::int64_t col0) const = 0;
  /// Applies a sketch to a validated, non-empty batch.
  virtual void sketch_apply(const SketchApplyProblem& problem) const = 0;
  /// Computes a validated performer_attention problem into problem.out.
  virtual void performer_attention(const PerformerProblem& problem) const = 0;
  /// The requested gradients of a validated problem, given dL/dout.
  virtual void performer_attention_backward(const PerformerProblem& problem, const TensorView& grad_out,
                                            const PerformerGradients& grads) const = 0;
  /// Computes a validated quantized_sketched_matmul problem into problem.out with the kernels of
  /// the factors' format (the core refuses a device whose backend has none, quantized.hpp).
  virtual void quantized_sketched_matmul(const QuantizedMatmulProblem& problem) const = 0;
  /// Computes a validated quantized_matmul problem (one GEMM on the full-rank W) into problem.out.
  virtual void quantized_matmul(const QuantizedDenseProblem& problem) const = 0;
  /// Whether `dtype` can be computed on this kind of device.
  virtual bool supports(DType dtype) const noexcept = 0;
  /// Number of devices of this kind that can be used (the CPU: 1).
  virtual int device_count() const noexcept = 0;
  /// The backend runtime's version (CUDA: e.g. 13000; the CPU: 0).
  virtual int runtime_version() const noexcept = 0;
  /// Statistics, peak reset and cache release of the pool of temporaries on `device`.
  virtual MemoryStats memory_stats(int device) const = 0;
  virtual void reset_peak(int device) const = 0;
  virtual void empty_cache(int device) const = 0;
};

/// The CPU backend (always present).
const Backend& cpu_backend();

/// The CUDA backend, or null in a build without it. Defined by src/cuda/ when the backend is
/// compiled, else by src/cpp/no_cuda_backend.cpp (CMake links exactly one of them).
const Backend* cuda_backend() noexcept;

/// The backend for devices of `type`, or null when this build has none.
inline const Backend* backend_for(DeviceType type) noexcept {
  return type == DeviceType::cpu ? &cpu_backend() : cuda_backend();
}

}  // namespace sketchcore::detail
