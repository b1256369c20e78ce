// Public entry point of the sketched GEMM: argument validation (once, for every backend)
// and dispatch to the backend of the operands' device.
#include "sketchcore/sketched_matmul.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "detail/backend.hpp"
#include "detail/check.hpp"
#include "detail/checked.hpp"
#include "detail/layout.hpp"
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

/// An Activation cast from an integer by a caller (the C API, the bindings) may name none.
void check_known_activation(Activation activation, const char* name) {
  for (const Activation known : all_activations()) {
    if (known == activation) return;
  }
  std::string names;
  for (const Activation known : all_activations()) names += std::string(names.empty() ? "" : ", ") + activation_name(known);
  detail::fail<std::invalid_argument>(kOp, name, "one of " + names,
                                      "the enumerator " + std::to_string(static_cast<int>(activation)));
}

const detail::Backend& backend_for(const TensorView& x) {
  const detail::Backend* backend = detail::backend_for(x.device().type);
  if (!backend) {
    detail::fail<device_error>(kOp, "x", "an array in CPU memory (this build of sketchcore has no CUDA backend)",
                               device_name(x.device()));
  }
  if (!backend->supports(x.dtype())) {
    detail::fail<dtype_error>(kOp, "x", "dtype float32 or float64 on the CPU (float16 and bfloat16 need a CUDA device)",
                              dtype_name(x.dtype()));
  }
  return *backend;
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
  // Every size the backends derive (T·k, the rows × T·k intermediate, the rows × d_out
  // output, byte counts of packed operands) must fit a signed 64-bit byte count.
  detail::check_addressable(kOp, "x", x);
  detail::check_addressable(kOp, "S", S);
  detail::check_addressable(kOp, "U", U);
  std::optional<std::int64_t> rows = 1;
  for (int d = 0; d + 1 < x.ndim(); ++d) rows = rows ? detail::checked_mul(*rows, x.size(d)) : std::nullopt;
  detail::check_addressable_lazy(kOp, "x", rows, x.dtype(), [&x] { return "leading dimensions " + detail::describe_shape(x); });
  e.rows = *rows;
  const std::optional<std::int64_t> width = detail::checked_mul(e.terms, e.rank);
  detail::check_addressable_lazy(kOp, "S", width, x.dtype(), [&S] { return "T·k columns of " + detail::describe_shape(S); });
  detail::checked_elements(kOp, "S", e.rows, *width, x.dtype(), "the intermediate x·S");
  detail::checked_elements(kOp, "U", e.rows, e.d_out, x.dtype(), "the output");
  return e;
}

std::vector<std::int64_t> with_last(const TensorView& x, std::int64_t last) {
  std::vector<std::int64_t> shape(x.shape().begin(), x.shape().end() - 1);
  shape.push_back(last);
  return shape;
}

void check_epilogue(const TensorView& x, const Epilogue& epilogue, const Extents& e) {
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
  check_known_activation(epilogue.activation, "activation");
  check_known_activation(epilogue.inner_activation, "inner_activation");
}

/// A view the call writes: expected shape, x's dtype and device, no repeated elements,
/// and no overlap with anything else the call reads or writes.
void check_destination(const TensorView& v, const char* name, const std::vector<std::int64_t>& expected,
                       const TensorView& x, std::initializer_list<std::pair<const TensorView*, const char*>> others) {
  detail::check_addressable(kOp, name, v);
  if (v.shape() != expected) {
    detail::fail<shape_error>(kOp, name, "shape " + shape_to_string(expected), detail::describe_shape(v));
  }
  check_same_device_and_dtype(x, v, name);
  if (!detail::has_unique_elements(v)) {
    detail::fail<std::invalid_argument>(kOp, name, "an array whose elements do not share memory",
                                        "strides " + shape_to_string(v.strides()));
  }
  for (const auto& [other, other_name] : others) {
    if (other && detail::overlaps(v, *other)) {
      detail::fail<std::invalid_argument>(kOp, name, std::string("memory disjoint from ") + other_name,
                                          std::string("an array overlapping ") + other_name);
    }
  }
}

/// Z must be readable and writable by BLAS as one row-major matrix.
void check_row_major(const TensorView& v, const char* name) {
  if (v.numel() == 0) return;  // nothing is read or written (NumPy gives empty arrays zero strides)
  const detail::RowMatrix m = detail::as_row_matrix(v);
  const bool ok = m.row_stride && (m.cols <= 1 || m.col_stride == 1) &&
                  (m.rows <= 1 || *m.row_stride >= std::max<std::int64_t>(m.cols, 1));
  if (!ok) {
    detail::fail<shape_error>(kOp, name, "row-major rows (unit last stride, leading dimensions that collapse)",
                              "strides " + shape_to_string(v.strides()));
  }
}

const TensorView* bias_of(const Epilogue& e) { return e.bias ? &*e.bias : nullptr; }

/// Fills in `end = -1` and checks 0 ≤ begin ≤ end ≤ T; a 2-D factor takes only [0, 1).
TermRange resolve_terms(TermRange range, const TensorView& factor, std::int64_t terms, const char* name) {
  if (range.end == -1) range.end = terms;
  const bool whole = range.begin == 0 && range.end == terms;
  if (range.begin < 0 || range.begin > range.end || range.end > terms || (factor.ndim() == 2 && !whole)) {
    detail::fail<std::invalid_argument>(
        kOp, name,
        factor.ndim() == 2 ? std::string("the whole range [0, 1) for a 2-D factor")
                           : "a range 0 ≤ begin ≤ end ≤ T = " + std::to_string(terms),
        "[" + std::to_string(range.begin) + ", " + std::to_string(range.end) + ")");
  }
  return range;
}

/// The shape of `factor` restricted to the terms of `range`.
std::vector<std::int64_t> with_terms(const TensorView& factor, TermRange range) {
  std::vector<std::int64_t> shape(factor.shape().begin(), factor.shape().end());
  if (factor.ndim() == 3) shape[0] = range.end - range.begin;
  return shape;
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
  check_epilogue(x, epilogue, e);
  check_destination(out, "out", with_last(x, e.d_out), x, {{&x, "x"}, {&S, "S"}, {&U, "U"}, {bias_of(epilogue), "bias"}});
  const detail::SketchedMatmulProblem problem{x, S, U, out, epilogue, e.rows, e.d_in, e.terms, e.rank, e.d_out};
  backend_for(x).sketched_matmul(problem);
}

void sketched_matmul(const TensorView& x, const TensorView& S, const TensorView& U, const TensorView& out,
                     const Epilogue& epilogue, const TensorView& intermediate) {
  const Extents e = check_operands(x, S, U);
  check_epilogue(x, epilogue, e);
  const auto inputs = {std::pair<const TensorView*, const char*>{&x, "x"}, {&S, "S"}, {&U, "U"}, {bias_of(epilogue), "bias"}};
  check_destination(out, "out", with_last(x, e.d_out), x, inputs);
  check_destination(intermediate, "intermediate", with_last(x, e.terms * e.rank), x,
                    {{&x, "x"}, {&S, "S"}, {&U, "U"}, {bias_of(epilogue), "bias"}, {&out, "out"}});
  check_row_major(intermediate, "intermediate");
  detail::SketchedMatmulProblem problem{x, S, U, out, epilogue, e.rows, e.d_in, e.terms, e.rank, e.d_out};
  problem.intermediate = &intermediate;
  backend_for(x).sketched_matmul(problem);
}

void sketched_matmul_backward(const TensorView& grad_out, const TensorView& x, const TensorView& S,
                              const TensorView& U, const TensorView& intermediate, const Epilogue& epilogue,
                              const SketchedMatmulGradients& grads) {
  const Extents e = check_operands(x, S, U);
  check_epilogue(x, epilogue, e);
  if (grad_out.shape() != with_last(x, e.d_out)) {
    detail::fail<shape_error>(kOp, "grad_out", "shape " + shape_to_string(with_last(x, e.d_out)),
                              detail::describe_shape(grad_out));
  }
  check_same_device_and_dtype(x, grad_out, "grad_out");
  if (intermediate.shape() != with_last(x, e.terms * e.rank)) {
    detail::fail<shape_error>(kOp, "intermediate", "shape " + shape_to_string(with_last(x, e.terms * e.rank)),
                              detail::describe_shape(intermediate));
  }
  check_same_device_and_dtype(x, intermediate, "intermediate");
  check_row_major(intermediate, "intermediate");
  if (grads.bias && !epilogue.bias) {
    detail::fail<std::invalid_argument>(kOp, "grad bias", "a bias in the epilogue", "none");
  }
  const TensorView* gx = grads.x ? &*grads.x : nullptr;
  const TensorView* gS = grads.S ? &*grads.S : nullptr;
  const TensorView* gU = grads.U ? &*grads.U : nullptr;
  const TensorView* gb = grads.bias ? &*grads.bias : nullptr;
  const std::initializer_list<std::pair<const TensorView*, const char*>> read = {
      {&x, "x"}, {&S, "S"}, {&U, "U"}, {bias_of(epilogue), "bias"}, {&grad_out, "grad_out"}, {&intermediate, "intermediate"}};
  SketchedMatmulGradients resolved = grads;
  resolved.S_terms = resolve_terms(grads.S_terms, S, e.terms, "S_terms");
  resolved.U_terms = resolve_terms(grads.U_terms, U, e.terms, "U_terms");
  if (gx) check_destination(*gx, "grad x", x.shape(), x, read);
  if (gS) check_destination(*gS, "grad S", with_terms(S, resolved.S_terms), x, read);
  if (gU) check_destination(*gU, "grad U", with_terms(U, resolved.U_terms), x, read);
  if (gb) check_destination(*gb, "grad bias", {e.d_out}, x, read);
  const TensorView* written[] = {gx, gS, gU, gb};
  const char* names[] = {"grad x", "grad S", "grad U", "grad bias"};
  for (int i = 0; i < 4; ++i) {
    for (int j = i + 1; j < 4; ++j) {
      if (written[i] && written[j] && detail::overlaps(*written[i], *written[j])) {
        detail::fail<std::invalid_argument>(kOp, names[j], std::string("memory disjoint from ") + names[i],
                                            std::string("an array overlapping ") + names[i]);
      }
    }
  }
  detail::SketchedMatmulProblem problem{x, S, U, grad_out, epilogue, e.rows, e.d_in, e.terms, e.rank, e.d_out};
  problem.intermediate = &intermediate;
  backend_for(x).sketched_matmul_backward(problem, resolved);
}

}  // namespace sketchcore
