// Public entry point of the sketched GEMM: argument validation (once, for every backend)
// and dispatch to the backend of the operands' device.
#include "sketchcore/sketched_matmul.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include "detail/backend.hpp"
#include "detail/check.hpp"
#include "detail/strided.hpp"
#include "sketchcore/errors.hpp"

namespace sketchcore {

namespace {

constexpr const char* kOp = "sketched_matmul";

struct Extents {
  std::int64_t rows, d_in, terms, rank, d_out;
};

void check_same_device_and_dtype(const TensorView& reference, const TensorView& v, const char* name) {
  if (v.device() != reference.device()) {
    detail::fail<device_error>(kOp, name, "device " + device_name(reference.device()) + " (the device of x)",
                               device_name(v.device()));
  }
  if (v.dtype() != reference.dtype()) {
    detail::fail<dtype_error>(kOp, name, std::string("dtype ") + dtype_name(reference.dtype()) + " (the dtype of x)",
                              dtype_name(v.dtype()));
  }
}

const detail::Backend& backend_for(const TensorView& x) {
  if (x.device().type != DeviceType::cpu) {
    detail::fail<device_error>(kOp, "x", "an array in CPU memory (this build has no CUDA implementation yet)",
                               device_name(x.device()));
  }
  if (x.dtype() != DType::float32 && x.dtype() != DType::float64) {
    detail::fail<dtype_error>(kOp, "x", "dtype float32 or float64 on the CPU", dtype_name(x.dtype()));
  }
  return detail::cpu_backend();
}

Extents check_operands(const TensorView& x, const TensorView& S, const TensorView& U) {
  check_same_device_and_dtype(x, S, "S");
  check_same_device_and_dtype(x, U, "U");
  backend_for(x);
  if (x.ndim() < 1) {
    detail::fail<shape_error>(kOp, "x", "an array of shape (..., d_in) with at least 1 dimension",
                              detail::describe_shape(x));
  }
  if (S.ndim() != 2 && S.ndim() != 3) {
    detail::fail<shape_error>(kOp, "S", "shape (d_in, k) or (T, d_in, k)", detail::describe_shape(S));
  }
  if (U.ndim() != S.ndim()) {
    detail::fail<shape_error>(kOp, "U",
                              S.ndim() == 2 ? "a 2-D array (k, d_out) because S is 2-D"
                                            : "a 3-D array (T, k, d_out) because S is 3-D",
                              detail::describe_shape(U));
  }
  Extents e{};
  e.terms = S.ndim() == 3 ? S.size(0) : 1;
  e.d_in = S.size(-2);
  e.rank = S.size(-1);
  e.d_out = U.size(-1);
  if (S.ndim() == 3 && U.size(0) != e.terms) {
    detail::fail<shape_error>(kOp, "U", "T = " + std::to_string(e.terms) + " terms in dimension 0 (S.shape[0])",
                              detail::describe_shape(U));
  }
  if (U.size(-2) != e.rank) {
    detail::fail<shape_error>(kOp, "U", "k = " + std::to_string(e.rank) + " rows per term (S.shape[-1])",
                              detail::describe_shape(U));
  }
  if (x.size(-1) != e.d_in) {
    detail::fail<shape_error>(kOp, "x", "last dimension d_in = " + std::to_string(e.d_in) + " (S.shape[-2])",
                              detail::describe_shape(x));
  }
  e.rows = x.numel() / (e.d_in > 0 ? e.d_in : 1);
  if (e.d_in == 0) {
    e.rows = 1;
    for (int d = 0; d + 1 < x.ndim(); ++d) e.rows *= x.size(d);
  }
  return e;
}

void check_output(const TensorView& x, const TensorView& S, const TensorView& U, const TensorView& out,
                  const Epilogue& epilogue, const Extents& e) {
  std::vector<std::int64_t> expected(x.shape().begin(), x.shape().end() - 1);
  expected.push_back(e.d_out);
  if (out.shape() != expected) {
    detail::fail<shape_error>(kOp, "out", "shape " + shape_to_string(expected), detail::describe_shape(out));
  }
  check_same_device_and_dtype(x, out, "out");
  if (!detail::has_unique_elements(out)) {
    detail::fail<std::invalid_argument>(kOp, "out", "an array whose elements do not share memory",
                                        "strides " + shape_to_string(out.strides()));
  }
  if (epilogue.bias) {
    const TensorView& bias = *epilogue.bias;
    if (bias.ndim() != 1 || bias.size(0) != e.d_out) {
      detail::fail<shape_error>(kOp, "bias", "shape (" + std::to_string(e.d_out) + ",) (d_out = U.shape[-1])",
                                detail::describe_shape(bias));
    }
    check_same_device_and_dtype(x, bias, "bias");
  }
  if (!(epilogue.dropout_p >= 0.0 && epilogue.dropout_p <= 1.0)) {
    detail::fail<std::invalid_argument>(kOp, "dropout_p", "a probability in [0, 1]", std::to_string(epilogue.dropout_p));
  }
  if (!std::isfinite(epilogue.scale)) {
    detail::fail<std::invalid_argument>(kOp, "scale", "a finite number", std::to_string(epilogue.scale));
  }
  const std::pair<const TensorView*, const char*> inputs[] = {{&x, "x"}, {&S, "S"}, {&U, "U"}};
  for (const auto& [input, name] : inputs) {
    if (detail::overlaps(out, *input)) {
      detail::fail<std::invalid_argument>(kOp, "out", "memory disjoint from the inputs",
                                          std::string("an array overlapping ") + name);
    }
  }
  if (epilogue.bias && detail::overlaps(out, *epilogue.bias)) {
    detail::fail<std::invalid_argument>(kOp, "out", "memory disjoint from the inputs", "an array overlapping bias");
  }
}

}  // namespace

std::vector<std::int64_t> sketched_matmul_output_shape(const TensorView& x, const TensorView& S,
                                                       const TensorView& U) {
  const Extents e = check_operands(x, S, U);
  std::vector<std::int64_t> shape(x.shape().begin(), x.shape().end() - 1);
  shape.push_back(e.d_out);
  return shape;
}

void sketched_matmul(const TensorView& x, const TensorView& S, const TensorView& U, const TensorView& out,
                     const Epilogue& epilogue) {
  const Extents e = check_operands(x, S, U);
  check_output(x, S, U, out, epilogue, e);
  const detail::SketchedMatmulProblem problem{x, S, U, out, epilogue, e.rows, e.d_in, e.terms, e.rank, e.d_out};
  backend_for(x).sketched_matmul(problem);
}

}  // namespace sketchcore
