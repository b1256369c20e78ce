// The CPU backend: float32 and float64 computed directly on host memory; float16 and bfloat16
// computed in float32 (operands widened by vectorised conversions, results rounded once into
// the caller's arrays: cpu/half.hpp; x, out, Z and dx chunk by chunk), except that products of
// two bfloat16 operands run in the native bfloat16 GEMM where the CPU has one (cpu/gemm_bf16.hpp:
// the same float32 sums of exact products, without widening). Temporaries come from the host
// pool.
#include <cstdint>
#include <optional>
#include <string>

#include "cpu/cpu_ops.hpp"
#include "cpu/half.hpp"

namespace sketchcore::detail {

namespace {

/// An optional view, widened when present.
std::optional<Widened> widen(const std::optional<TensorView>& v) {
  return v ? std::optional<Widened>(std::in_place, *v) : std::nullopt;
}
std::optional<Narrowed> narrow(const std::optional<TensorView>& v) {
  return v ? std::optional<Narrowed>(std::in_place, *v) : std::nullopt;
}

// The factors and the bias are widened whole (they are small and S is packed anyway); x, out
// and the intermediate stay 16-bit: the float32 executor widens and rounds them chunk by chunk
// (cpu/sketched_matmul_cpu.cpp).
void forward_in_float32(const SketchedMatmulProblem& p) {
  const Widened S(p.S), U(p.U);
  const std::optional<Widened> bias = widen(p.epilogue.bias);
  Epilogue epilogue = p.epilogue;
  if (bias) epilogue.bias = bias->view();
  SketchedMatmulProblem wide{p.x, S.view(), U.view(), p.out, epilogue, p.rows, p.d_in, p.terms, p.rank, p.d_out};
  wide.intermediate = p.intermediate;
  cpu_sketched_matmul(wide, {&p.S, &p.U});
}

// Likewise x, dL/dy, Z and dx stay 16-bit in the backward (widened or rounded chunk by chunk);
// the factors' and the bias's gradients, accumulated over the chunks, are float32 until stored.
void backward_in_float32(const SketchedMatmulProblem& p, const SketchedMatmulGradients& g) {
  const Widened S(p.S), U(p.U);
  const std::optional<Widened> bias = widen(p.epilogue.bias);
  const std::optional<Narrowed> dS = narrow(g.S), dU = narrow(g.U), dbias = narrow(g.bias);
  Epilogue epilogue = p.epilogue;
  if (bias) epilogue.bias = bias->view();
  SketchedMatmulGradients wide_grads = g;
  if (dS) wide_grads.S = dS->view();
  if (dU) wide_grads.U = dU->view();
  if (dbias) wide_grads.bias = dbias->view();
  SketchedMatmulProblem wide{p.x, S.view(), U.view(), p.out, epilogue, p.rows, p.d_in, p.terms, p.rank, p.d_out};
  wide.intermediate = p.intermediate;
  cpu_sketched_matmul_backward(wide, wide_grads, {&p.S, &p.U});
  for (const auto* d : {&dS, &dU, &dbias}) {
    if (*d) (*d)->store();
  }
}

class CpuBackend final : public Backend {
 public:
  void sketched_matmul(const SketchedMatmulProblem& p) const override {
    if (is_half(p.x.dtype())) return forward_in_float32(p);
    cpu_sketched_matmul(p);
  }
  void sketched_matmul_backward(const SketchedMatmulProblem& p, const SketchedMatmulGradients& g) const override {
    if (is_half(p.x.dtype())) return backward_in_float32(p, g);
    cpu_sketched_matmul_backward(p, g);
  }
  void sketch_to_dense(const SketchOperator& op, const TensorView& out, std::int64_t row0,
                       std::int64_t col0) const override {
    const Narrowed wide(out);
    cpu_sketch_to_dense(op, wide.view(), row0, col0);
    wide.store();
  }
  void sketch_apply(const SketchApplyProblem& p) const override {
    const Widened a(p.a);
    const Narrowed out(p.out);
    cpu_sketch_apply({p.op, a.view(), out.view(), p.side, p.transpose});
    out.store();
  }
  void performer_attention(const PerformerProblem& p) const override { cpu_performer_attention(p); }
  void performer_attention_backward(const PerformerProblem& p, const TensorView& grad_out,
                                    const PerformerGradients& g) const override {
    cpu_performer_attention_backward(p, grad_out, g);
  }
  // The CPU's kernels per quantized format: int8 only (the core refuses the others before here).
  void quantized_sketched_matmul(const QuantizedMatmulProblem& p) const override {
    if (p.S.format() != QuantFormat::int8) no_cpu_kernels(p.S.format());
    cpu_int8_sketched_matmul(p);
  }
  void quantized_matmul(const QuantizedDenseProblem& p) const override {
    if (p.W.format() != QuantFormat::int8) no_cpu_kernels(p.W.format());
    cpu_int8_matmul(p);
  }
  [[noreturn]] static void no_cpu_kernels(QuantFormat format) {
    throw device_error(std::string("the CPU backend has no ") + quant_format_info(format).name + " kernels");
  }
  bool supports(DType) const noexcept override { return true; }  // 16-bit types through float32
  int device_count() const noexcept override { return 1; }
  int runtime_version() const noexcept override { return 0; }
  MemoryStats memory_stats(int) const override { return default_host_pool().stats(); }
  void reset_peak(int) const override { default_host_pool().reset_peak(); }
  void empty_cache(int) const override { default_host_pool().empty_cache(); }
};

}  // namespace

const Backend& cpu_backend() {
  static const CpuBackend backend;
  return backend;
}

}  // namespace sketchcore::detail
