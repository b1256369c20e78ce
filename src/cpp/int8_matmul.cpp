// Public entry point of the int8 sketched GEMM: argument validation (once) and dispatch to the
// backend of x's device; the choice of the CPU's int8 kernel family (cpu/int8_gemm.hpp).
#include "sketchcore/int8_matmul.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "cpu/int8_gemm.hpp"
#include "detail/backend.hpp"
#include "detail/check.hpp"
#include "detail/checked.hpp"
#include "detail/layout.hpp"
#include "sketchcore/errors.hpp"

namespace sketchcore {

namespace {

constexpr const char* kOp = "int8_sketched_matmul";
constexpr const char* kDenseOp = "int8_matmul";

void check_float32_like_x(const char* op, const TensorView& v, const TensorView& x, const char* name) {
  if (v.device() != x.device()) {
    detail::fail<device_error>(op, name, "device " + device_name(x.device()) + " (the device of x)",
                               device_name(v.device()));
  }
  if (v.dtype() != DType::float32) {
    detail::fail<dtype_error>(op, name, "dtype float32", dtype_name(v.dtype()));
  }
}

void check_bias(const char* op, const Epilogue& e, const TensorView& x, std::int64_t d_out) {
  if (!e.bias) return;
  check_float32_like_x(op, *e.bias, x, "bias");
  if (e.bias->ndim() != 1 || e.bias->size(0) != d_out) {
    detail::fail<shape_error>(op, "bias", "shape (" + std::to_string(d_out) + ",)", detail::describe_shape(*e.bias));
  }
}

void check_epilogue(const char* op, const Epilogue& e) {
  if (e.dropout_p != 0.0) {
    detail::fail<std::invalid_argument>(op, "dropout_p", "0 (the int8 path has no dropout)",
                                        std::to_string(e.dropout_p));
  }
  if (!std::isfinite(e.scale)) {
    detail::fail<std::invalid_argument>(op, "scale", "a finite number", std::to_string(e.scale));
  }
  for (const Activation a : {e.activation, e.inner_activation}) {
    bool known = false;
    for (const Activation k : all_activations()) known = known || k == a;
    if (!known) {
      detail::fail<std::invalid_argument>(op, a == e.activation ? "activation" : "inner_activation",
                                          "a known activation", "the enumerator " + std::to_string(static_cast<int>(a)));
    }
  }
}

void check_factor(const char* op, const char* name, const Int8Factor& factor) {
  if (!factor.valid()) {
    detail::fail<std::invalid_argument>(op, name, "a factor holding values", "a moved-from Int8Factor");
  }
}

/// SKETCHCORE_INT8_ISA, when set, must name a family: a misspelt cap would silently run
/// another kernel than the one asked for. Read once; refused at every int8 call.
void check_isa_environment(const char* op) {
  static const std::string bad = [] {
    const char* env = std::getenv("SKETCHCORE_INT8_ISA");
    if (env == nullptr) return std::string();
    for (auto isa : {detail::Int8Isa::portable, detail::Int8Isa::avx2, detail::Int8Isa::avx_vnni,
                     detail::Int8Isa::avx512_vnni, detail::Int8Isa::amx}) {
      if (std::string_view(env) == detail::int8_isa_name(isa)) return std::string();
    }
    return "'" + std::string(env) + "'";
  }();
  if (!bad.empty()) {
    detail::fail<std::invalid_argument>(op, "SKETCHCORE_INT8_ISA (environment variable)",
                                        "one of 'amx', 'avx512_vnni', 'avx_vnni', 'avx2', 'portable' or unset", bad);
  }
}

/// The checks of x shared by both entry points, except its last extent (each op names the factor it must match).
void check_x(const char* op, const TensorView& x) {
  check_isa_environment(op);
  if (x.ndim() < 1) detail::fail<shape_error>(op, "x", "at least 1 dimension (..., d_in)", "0 dimensions");
  if (x.dtype() != DType::float32) detail::fail<dtype_error>(op, "x", "dtype float32", dtype_name(x.dtype()));
}

void check_x_device(const char* op, const TensorView& x) {
  if (x.device().type != DeviceType::cpu && !detail::backend_for(x.device().type)) {
    detail::fail<device_error>(op, "x", "an array in CPU memory (this build of sketchcore has no CUDA backend)",
                               device_name(x.device()));
  }
}

std::string factor_shape(const Int8Factor& f) {
  return "shape (" + std::to_string(f.rows()) + ", " + std::to_string(f.cols()) + ")";
}

/// The checks of `out`, the bias and the epilogue shared by both entry points (after the output
/// shape was computed); returns the row stride of out.
std::int64_t check_out_and_epilogue(const char* op, const TensorView& x, const TensorView& out,
                                    const std::vector<std::int64_t>& shape, const Epilogue& epilogue,
                                    std::int64_t* rows_out) {
  check_float32_like_x(op, out, x, "out");
  if (out.shape() != shape) {
    detail::fail<shape_error>(op, "out", "shape " + shape_to_string(shape), detail::describe_shape(out));
  }
  check_bias(op, epilogue, x, shape.back());
  check_epilogue(op, epilogue);
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

detail::Int8Isa parse_isa(const std::string& name) {
  for (auto isa : {detail::Int8Isa::portable, detail::Int8Isa::avx2, detail::Int8Isa::avx_vnni,
                   detail::Int8Isa::avx512_vnni, detail::Int8Isa::amx}) {
    if (name == detail::int8_isa_name(isa)) return isa;
  }
  detail::fail<std::invalid_argument>("set_int8_gemm_isa", "name", "one of 'amx', 'avx512_vnni', 'avx_vnni', 'avx2', 'portable'",
                                      "'" + name + "'");
}

}  // namespace

std::vector<std::int64_t> int8_sketched_matmul_output_shape(const TensorView& x, const Int8Factor& S,
                                                            const Int8Factor& U) {
  check_factor(kOp, "S", S);
  check_factor(kOp, "U", U);
  check_x(kOp, x);
  if (x.size(-1) != S.rows()) {
    detail::fail<shape_error>(kOp, "S", "d_in = " + std::to_string(x.size(-1)) + " rows (x.shape[-1])", factor_shape(S));
  }
  if (U.rows() != S.cols()) {
    detail::fail<shape_error>(kOp, "U", std::to_string(S.cols()) + " rows (the columns of S)", factor_shape(U));
  }
  check_x_device(kOp, x);
  std::vector<std::int64_t> shape = x.shape();
  shape.back() = U.cols();
  return shape;
}

void int8_sketched_matmul(const TensorView& x, const Int8Factor& S, const Int8Factor& U, const TensorView& out,
                          const Epilogue& epilogue) {
  const std::vector<std::int64_t> shape = int8_sketched_matmul_output_shape(x, S, U);
  std::int64_t rows = 0;
  const std::int64_t out_row_stride = check_out_and_epilogue(kOp, x, out, shape, epilogue, &rows);
  const detail::Int8MatmulProblem problem{x, S, U, out, epilogue, rows, S.rows(), S.cols(), U.cols(), out_row_stride};
  detail::backend_for(x.device().type)->int8_sketched_matmul(problem);
}

std::vector<std::int64_t> int8_matmul_output_shape(const TensorView& x, const Int8Factor& W) {
  check_factor(kDenseOp, "W", W);
  check_x(kDenseOp, x);
  if (x.size(-1) != W.rows()) {
    detail::fail<shape_error>(kDenseOp, "W", "d_in = " + std::to_string(x.size(-1)) + " rows (x.shape[-1])",
                              factor_shape(W));
  }
  check_x_device(kDenseOp, x);
  std::vector<std::int64_t> shape = x.shape();
  shape.back() = W.cols();
  return shape;
}

void int8_matmul(const TensorView& x, const Int8Factor& W, const TensorView& out, const Epilogue& epilogue) {
  const std::vector<std::int64_t> shape = int8_matmul_output_shape(x, W);
  std::int64_t rows = 0;
  const std::int64_t out_row_stride = check_out_and_epilogue(kDenseOp, x, out, shape, epilogue, &rows);
  if (epilogue.inner_activation != Activation::none) {
    detail::fail<std::invalid_argument>(kDenseOp, "inner_activation",
                                        "none (a full-rank int8 product has no inner product to apply it to)",
                                        std::string("'") + activation_name(epilogue.inner_activation) + "'");
  }
  const detail::Int8DenseProblem problem{x, W, out, epilogue, rows, W.rows(), W.cols(), out_row_stride};
  detail::backend_for(x.device().type)->int8_matmul(problem);
}

std::string int8_gemm_isa() {
  check_isa_environment("int8_gemm_isa");
  return detail::int8_isa_name(detail::active_int8_isa());
}

void set_int8_gemm_isa(const std::string& name) {
  const detail::Int8Isa isa = parse_isa(name);
  if (!detail::int8_isa_supported(isa)) {
    detail::fail<std::invalid_argument>("set_int8_gemm_isa", "name", "a family this CPU runs",
                                        "'" + name + "' (not supported here)");
  }
  detail::set_active_int8_isa(isa);
}

bool int8_gemm_isa_supported(const std::string& name) { return detail::int8_isa_supported(parse_isa(name)); }

double int8_peak_macs_per_second(const std::string& name, std::int64_t iterations) {
  const detail::Int8Isa isa = parse_isa(name);
  if (iterations < 1) {
    detail::fail<std::invalid_argument>("int8_peak_macs_per_second", "iterations", "a positive count",
                                        std::to_string(iterations));
  }
  if (!detail::int8_isa_supported(isa)) {
    detail::fail<std::invalid_argument>("int8_peak_macs_per_second", "name", "a family this CPU runs",
                                        "'" + name + "' (not supported here)");
  }
#if SKETCHCORE_INT8_X86
  if (isa == detail::Int8Isa::amx) return detail::int8_peak_amx(iterations);
  if (isa == detail::Int8Isa::avx512_vnni) return detail::int8_peak_avx512_vnni(iterations);
  if (isa == detail::Int8Isa::avx_vnni) return detail::int8_peak_avx_vnni(iterations);
#endif
  (void)iterations;
  return 0.0;
}

}  // namespace sketchcore

namespace sketchcore {

std::vector<double> int8_gemm_seconds_for_bench(const float* x, std::int64_t rows, const Int8Factor& factor,
                                                float* out, std::int64_t repeats) {
  constexpr const char* kBench = "int8_gemm_seconds_for_bench";
  if (!factor.valid()) detail::fail<std::invalid_argument>(kBench, "factor", "a factor holding values", "a moved-from Int8Factor");
  if (rows < 0) detail::fail<std::invalid_argument>(kBench, "rows", "rows >= 0", std::to_string(rows));
  if (repeats < 1) detail::fail<std::invalid_argument>(kBench, "repeats", "repeats >= 1", std::to_string(repeats));
  const detail::Int8Isa isa = detail::active_int8_isa();
  const Int8Factor::Packed& b = factor.packed();
  const std::int64_t stride = detail::int8_rows_stride(b.groups);
  std::vector<std::uint8_t> xq(static_cast<std::size_t>(std::max<std::int64_t>(rows * stride, 1)));
  std::vector<float> scale(static_cast<std::size_t>(std::max<std::int64_t>(rows, 1)));
  detail::quantize_rows_int8(x, nullptr, b.rows, 1, rows, b.rows, isa, xq.data(), stride, scale.data());
  const detail::Int8Rows a{xq.data(), stride, scale.data(), detail::int8_isa_offsets_activations(isa)};
  std::vector<double> seconds;
  for (std::int64_t r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    detail::int8_gemm(a, rows, b, out, b.cols, nullptr, Activation::none, isa);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return seconds;
}

}  // namespace sketchcore
