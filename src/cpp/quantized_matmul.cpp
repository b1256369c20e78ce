// The one quantized sketched GEMM and full-rank GEMM (include/sketchcore/quantized.hpp): argument
// validation, once, named by the format's operation, and dispatch to the backend of x's device,
// which runs the format's kernels. int8_sketched_matmul, int8_matmul and fp8_sketched_matmul are
// thin wrappers of these.
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/int8_gemm.hpp"
#include "detail/backend.hpp"
#include "detail/check.hpp"
#include "detail/checked.hpp"
#include "detail/layout.hpp"
#include "detail/quantized_storage.hpp"
#include "sketchcore/errors.hpp"
#include "sketchcore/fp8_matmul.hpp"
#include "sketchcore/int8_matmul.hpp"

namespace sketchcore {

namespace {

void check_float32_like_x(const char* op, const TensorView& v, const TensorView& x, const char* name) {
  if (v.device() != x.device()) {
    detail::fail<device_error>(op, name, "device " + device_name(x.device()) + " (the device of x)",
                               device_name(v.device()));
  }
  if (v.dtype() != DType::float32) detail::fail<dtype_error>(op, name, "dtype float32", dtype_name(v.dtype()));
}

void check_epilogue(const char* op, const QuantFormatInfo& f, const Epilogue& e, const TensorView& x,
                    std::int64_t d_out) {
  if (e.bias) {
    check_float32_like_x(op, *e.bias, x, "bias");
    if (e.bias->ndim() != 1 || e.bias->size(0) != d_out) {
      detail::fail<shape_error>(op, "bias", "shape (" + std::to_string(d_out) + ",)", detail::describe_shape(*e.bias));
    }
  }
  if (e.dropout_p != 0.0) {
    detail::fail<std::invalid_argument>(op, "dropout_p", std::string("0 (the ") + f.name + " path has no dropout)",
                                        std::to_string(e.dropout_p));
  }
  if (!std::isfinite(e.scale)) detail::fail<std::invalid_argument>(op, "scale", "a finite number", std::to_string(e.scale));
  for (const Activation a : {e.activation, e.inner_activation}) {
    bool known = false;
    for (const Activation k : all_activations()) known = known || k == a;
    if (!known) {
      detail::fail<std::invalid_argument>(op, a == e.activation ? "activation" : "inner_activation",
                                          "a known activation", "the enumerator " + std::to_string(static_cast<int>(a)));
    }
  }
}

void check_factor(const char* op, const char* name, const QuantizedFactor& factor) {
  if (!factor.valid()) {
    detail::fail<std::invalid_argument>(op, name, "a factor holding values",
                                        std::string("a moved-from ") + quant_format_info(factor.format()).factor_type);
  }
}

std::string factor_shape(const QuantizedFactor& f) {
  return "shape (" + std::to_string(f.rows()) + ", " + std::to_string(f.cols()) + ")";
}

/// The checks of x shared by both GEMMs, except its last extent (each names the factor it must match).
void check_x(const char* op, const QuantFormatInfo& f, const TensorView& x) {
  if (f.format == QuantFormat::int8) detail::check_int8_isa_environment(op);
  if (x.ndim() < 1) detail::fail<shape_error>(op, "x", "at least 1 dimension (..., d_in)", "0 dimensions");
  if (x.dtype() != DType::float32) detail::fail<dtype_error>(op, "x", "dtype float32", dtype_name(x.dtype()));
}

/// x's device must have a backend with kernels of the format.
void check_x_device(const char* op, const QuantFormatInfo& f, const TensorView& x) {
  if (x.device().type == DeviceType::cpu) {
    if (!f.cpu_kernels) detail::fail<device_error>(op, "x", f.device_requirement, device_name(x.device()));
    return;
  }
  if (detail::backend_for(x.device().type)) return;
  detail::fail<device_error>(op, "x",
                             f.cpu_kernels ? "an array in CPU memory (this build of sketchcore has no CUDA backend)"
                                           : "a build of sketchcore with the CUDA backend (this one has none) for a CUDA array",
                             device_name(x.device()));
}

/// The checks of `out`, the bias and the epilogue shared by both GEMMs (after the output shape was
/// computed); returns the row stride of out and its row count in *rows_out.
std::int64_t check_out_and_epilogue(const char* op, const QuantFormatInfo& f, const TensorView& x,
                                    const TensorView& out, const std::vector<std::int64_t>& shape,
                                    const Epilogue& epilogue, std::int64_t* rows_out) {
  check_float32_like_x(op, out, x, "out");
  if (out.shape() != shape) detail::fail<shape_error>(op, "out", "shape " + shape_to_string(shape), detail::describe_shape(out));
  check_epilogue(op, f, epilogue, x, shape.back());
  const detail::RowMatrix rows = detail::as_row_matrix(out);
  if (!rows.row_stride || (rows.cols > 1 && rows.col_stride != 1) || (rows.rows > 1 && *rows.row_stride < rows.cols)) {
    detail::fail<shape_error>(op, "out", "unit column stride and rows that collapse into one row stride",
                              "strides " + shape_to_string(out.strides()));
  }
  if (detail::overlaps(out, x) || (epilogue.bias && detail::overlaps(out, *epilogue.bias))) {
    detail::fail<shape_error>(op, "out", "no overlap with x or bias", "overlapping memory");
  }
  detail::check_addressable(op, "x", x);
  *rows_out = rows.rows;
  return rows.row_stride.value_or(0);
}

}  // namespace

std::vector<std::int64_t> quantized_sketched_matmul_output_shape(const TensorView& x, const QuantizedFactor& S,
                                                                 const QuantizedFactor& U) {
  const QuantFormatInfo& f = quant_format_info(S.format());
  const char* op = f.sketched_op;
  check_factor(op, "S", S);
  check_factor(op, "U", U);
  if (U.format() != S.format()) {
    detail::fail<std::invalid_argument>(op, "U", std::string("a factor of format ") + f.name + " (the format of S)",
                                        std::string("format ") + quant_format_info(U.format()).name);
  }
  check_x(op, f, x);
  if (x.size(-1) != S.rows()) {
    detail::fail<shape_error>(op, "S", "d_in = " + std::to_string(x.size(-1)) + " rows (x.shape[-1])", factor_shape(S));
  }
  if (U.rows() != S.cols()) {
    detail::fail<shape_error>(op, "U", std::to_string(S.cols()) + " rows (the columns of S)", factor_shape(U));
  }
  check_x_device(op, f, x);
  std::vector<std::int64_t> shape = x.shape();
  shape.back() = U.cols();
  return shape;
}

void quantized_sketched_matmul(const TensorView& x, const QuantizedFactor& S, const QuantizedFactor& U,
                               const TensorView& out, const Epilogue& epilogue) {
  const std::vector<std::int64_t> shape = quantized_sketched_matmul_output_shape(x, S, U);
  const QuantFormatInfo& f = quant_format_info(S.format());
  std::int64_t rows = 0;
  const std::int64_t out_row_stride = check_out_and_epilogue(f.sketched_op, f, x, out, shape, epilogue, &rows);
  const detail::QuantizedMatmulProblem problem{x, S, U, out, epilogue, rows, S.rows(), S.cols(), U.cols(), out_row_stride};
  detail::backend_for(x.device().type)->quantized_sketched_matmul(problem);
}

std::vector<std::int64_t> quantized_matmul_output_shape(const TensorView& x, const QuantizedFactor& W) {
  const QuantFormatInfo& f = quant_format_info(W.format());
  const char* op = f.dense_op;
  check_factor(op, "W", W);
  check_x(op, f, x);
  if (x.size(-1) != W.rows()) {
    detail::fail<shape_error>(op, "W", "d_in = " + std::to_string(x.size(-1)) + " rows (x.shape[-1])", factor_shape(W));
  }
  check_x_device(op, f, x);
  std::vector<std::int64_t> shape = x.shape();
  shape.back() = W.cols();
  return shape;
}

void quantized_matmul(const TensorView& x, const QuantizedFactor& W, const TensorView& out, const Epilogue& epilogue) {
  const std::vector<std::int64_t> shape = quantized_matmul_output_shape(x, W);
  const QuantFormatInfo& f = quant_format_info(W.format());
  std::int64_t rows = 0;
  const std::int64_t out_row_stride = check_out_and_epilogue(f.dense_op, f, x, out, shape, epilogue, &rows);
  if (epilogue.inner_activation != Activation::none) {
    detail::fail<std::invalid_argument>(f.dense_op, "inner_activation",
                                        std::string("none (a full-rank ") + f.name +
                                            " product has no inner product to apply it to)",
                                        std::string("'") + activation_name(epilogue.inner_activation) + "'");
  }
  const detail::QuantizedDenseProblem problem{x, W, out, epilogue, rows, W.rows(), W.cols(), out_row_stride};
  detail::backend_for(x.device().type)->quantized_matmul(problem);
}

// The named entry points of each format: the factor types fix the format.

std::vector<std::int64_t> int8_sketched_matmul_output_shape(const TensorView& x, const Int8Factor& S, const Int8Factor& U) {
  return quantized_sketched_matmul_output_shape(x, S, U);
}
void int8_sketched_matmul(const TensorView& x, const Int8Factor& S, const Int8Factor& U, const TensorView& out,
                          const Epilogue& epilogue) {
  quantized_sketched_matmul(x, S, U, out, epilogue);
}
std::vector<std::int64_t> int8_matmul_output_shape(const TensorView& x, const Int8Factor& W) {
  return quantized_matmul_output_shape(x, W);
}
void int8_matmul(const TensorView& x, const Int8Factor& W, const TensorView& out, const Epilogue& epilogue) {
  quantized_matmul(x, W, out, epilogue);
}
std::vector<std::int64_t> fp8_sketched_matmul_output_shape(const TensorView& x, const Fp8Factor& S, const Fp8Factor& U) {
  return quantized_sketched_matmul_output_shape(x, S, U);
}
void fp8_sketched_matmul(const TensorView& x, const Fp8Factor& S, const Fp8Factor& U, const TensorView& out,
                         const Epilogue& epilogue) {
  quantized_sketched_matmul(x, S, U, out, epilogue);
}

}  // namespace sketchcore
