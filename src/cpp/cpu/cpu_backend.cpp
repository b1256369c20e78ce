// The CPU backend: float32 and float64 on host memory, temporaries from the host pool.
#include "cpu/cpu_ops.hpp"

namespace sketchcore::detail {

namespace {

class CpuBackend final : public Backend {
 public:
  void sketched_matmul(const SketchedMatmulProblem& p) const override { cpu_sketched_matmul(p); }
  void sketched_matmul_backward(const SketchedMatmulProblem& p, const SketchedMatmulGradients& g) const override {
    cpu_sketched_matmul_backward(p, g);
  }
  void sketch_to_dense(const SketchOperator& op, const TensorView& out, std::int64_t row0,
                       std::int64_t col0) const override {
    cpu_sketch_to_dense(op, out, row0, col0);
  }
  void sketch_apply(const SketchApplyProblem& p) const override { cpu_sketch_apply(p); }
  bool supports(DType dtype) const noexcept override { return dtype == DType::float32 || dtype == DType::float64; }
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
