// Public sketching entry points: argument validation (once, for every backend) and dispatch
// through detail::Backend to the backend of the operands' device (kernels: cpu/sketch_cpu.cpp,
// ../cuda/cuda_sketch.cu).
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "detail/backend.hpp"
#include "detail/check.hpp"
#include "detail/checked.hpp"
#include "detail/layout.hpp"
#include "sketchcore/errors.hpp"
#include "sketchcore/sketch.hpp"

namespace sketchcore {

namespace {

constexpr SketchKind kKinds[] = {SketchKind::gaussian,    SketchKind::rademacher,  SketchKind::uniform,
                                 SketchKind::sparse_sign, SketchKind::countsketch, SketchKind::srht};
constexpr std::int64_t kMaxExtent = (std::int64_t{1} << 31) - 1;

/// Arrays on a device this build has a backend for, of a dtype that backend computes.
/// `like` (a) fixes the dtype and device of `out`.
void check_array(const TensorView& v, const char* op, const char* name, const TensorView* like = nullptr) {
  const bool cuda = detail::cuda_backend() != nullptr;
  const detail::Backend* backend = detail::backend_for(v.device().type);
  if (!backend) {
    detail::fail<device_error>(op, name,
                               cuda ? "an array in CPU or CUDA memory"
                                    : "an array in CPU memory (this build of sketchcore has no CUDA backend)",
                               device_name(v.device()));
  }
  if (like && v.device() != like->device()) {
    detail::fail<device_error>(op, name, "an array on " + device_name(like->device()) + " (the device of a)",
                               device_name(v.device()));
  }
  if (!backend->supports(v.dtype())) {
    detail::fail<dtype_error>(op, name, "dtype float32 or float64 (float16 and bfloat16 too on a CUDA device)",
                              dtype_name(v.dtype()));
  }
  if (like && v.dtype() != like->dtype()) {
    detail::fail<dtype_error>(op, name, std::string("dtype ") + dtype_name(like->dtype()) + " (the dtype of a)",
                              dtype_name(v.dtype()));
  }
  detail::check_addressable(op, name, v);
}

}  // namespace

const char* sketch_kind_name(SketchKind kind) noexcept {
  switch (kind) {
    case SketchKind::gaussian: return "gaussian";
    case SketchKind::rademacher: return "rademacher";
    case SketchKind::uniform: return "uniform";
    case SketchKind::sparse_sign: return "sparse_sign";
    case SketchKind::countsketch: return "countsketch";
    case SketchKind::srht: return "srht";
  }
  return "unknown";
}

SketchKind parse_sketch_kind(std::string_view name) {
  return detail::parse_named(name, kKinds, &sketch_kind_name, "sketch", "kind");
}

void validate_sketch(const SketchOperator& op) {
  const char* kOp = "sketch";
  if (op.rows < 1 || op.rows > kMaxExtent) {
    detail::fail<std::invalid_argument>(kOp, "m", "an integer in [1, 2^31)", std::to_string(op.rows));
  }
  if (op.cols < 1 || op.cols > kMaxExtent) {
    detail::fail<std::invalid_argument>(kOp, "n", "an integer in [1, 2^31)", std::to_string(op.cols));
  }
  if (op.kind == SketchKind::sparse_sign && (op.nnz < 1 || op.nnz > op.rows)) {
    detail::fail<std::invalid_argument>(kOp, "nnz", "an integer in [1, m = " + std::to_string(op.rows) + "]",
                                        std::to_string(op.nnz));
  }
  if (op.kind == SketchKind::srht) {
    std::int64_t padded = 1;
    while (padded < op.cols) padded *= 2;
    if (padded > kMaxExtent) {
      detail::fail<std::invalid_argument>(kOp, "n", "at most 2^30 for srht", std::to_string(op.cols));
    }
    if (op.rows > padded) {
      detail::fail<std::invalid_argument>(kOp, "m",
                                          "at most n rounded up to a power of two (" + std::to_string(padded) + ") for srht",
                                          std::to_string(op.rows));
    }
  }
}

void sketch_to_dense(const SketchOperator& op, const TensorView& out, std::int64_t row0, std::int64_t col0) {
  const char* kOp = "sketch.to_dense";
  validate_sketch(op);
  check_array(out, kOp, "out");
  if (out.ndim() != 2) detail::fail<shape_error>(kOp, "out", "a 2-D array", detail::describe_shape(out));
  const std::int64_t rows = out.size(0), cols = out.size(1);
  if (row0 < 0 || col0 < 0 || row0 + rows > op.rows || col0 + cols > op.cols) {
    detail::fail<shape_error>(kOp, "out", "a block inside the (" + std::to_string(op.rows) + ", " +
                                              std::to_string(op.cols) + ") operator",
                              "rows [" + std::to_string(row0) + ", " + std::to_string(row0 + rows) + ") × columns [" +
                                  std::to_string(col0) + ", " + std::to_string(col0 + cols) + ")");
  }
  if (!detail::has_unique_elements(out)) {
    detail::fail<std::invalid_argument>(kOp, "out", "an array whose elements do not share memory",
                                        "strides " + shape_to_string(out.strides()));
  }
  detail::backend_for(out.device().type)->sketch_to_dense(op, out, row0, col0);
}

std::vector<std::int64_t> sketch_apply_output_shape(const SketchOperator& op, const TensorView& a, Side side,
                                                    bool transpose) {
  const char* kOp = "sketch.apply";
  validate_sketch(op);
  check_array(a, kOp, "a");
  const std::int64_t m = transpose ? op.cols : op.rows, n = transpose ? op.rows : op.cols;
  if (a.ndim() < 1) detail::fail<shape_error>(kOp, "a", "an array with at least 1 dimension", detail::describe_shape(a));
  std::vector<std::int64_t> shape = a.shape();
  if (side == Side::left) {
    const int dim = a.ndim() == 1 ? 0 : a.ndim() - 2;
    if (a.size(dim) != n) {
      detail::fail<shape_error>(kOp, "a", "shape (..., " + std::to_string(n) + ", p) for a left application of a (" +
                                              std::to_string(m) + ", " + std::to_string(n) + ") operator",
                                detail::describe_shape(a));
    }
    shape[static_cast<std::size_t>(dim)] = m;
  } else {
    if (a.size(-1) != m) {
      detail::fail<shape_error>(kOp, "a", "shape (..., p, " + std::to_string(m) + ") for a right application of a (" +
                                              std::to_string(m) + ", " + std::to_string(n) + ") operator",
                                detail::describe_shape(a));
    }
    shape.back() = n;
  }
  return shape;
}

void sketch_apply(const SketchOperator& op, const TensorView& a, const TensorView& out, Side side, bool transpose) {
  const char* kOp = "sketch.apply";
  const auto expected = sketch_apply_output_shape(op, a, side, transpose);
  check_array(out, kOp, "out", &a);
  if (out.shape() != expected) {
    detail::fail<shape_error>(kOp, "out", "shape " + shape_to_string(expected), detail::describe_shape(out));
  }
  if (!detail::has_unique_elements(out)) {
    detail::fail<std::invalid_argument>(kOp, "out", "an array whose elements do not share memory",
                                        "strides " + shape_to_string(out.strides()));
  }
  if (detail::overlaps(out, a)) {
    detail::fail<std::invalid_argument>(kOp, "out", "memory disjoint from a", "an array overlapping a");
  }
  if (a.numel() == 0 || out.numel() == 0) return;
  const bool column = side == Side::left;
  const TensorView a_matrices = detail::as_matrix(a, column), out_matrices = detail::as_matrix(out, column);
  detail::backend_for(a.device().type)->sketch_apply({op, a_matrices, out_matrices, side, transpose});
}

}  // namespace sketchcore
