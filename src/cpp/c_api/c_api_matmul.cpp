// The C ABI's products (include/sketchcore/sketchcore.h): the sketched GEMM, and the int8 path —
// quantization, the packed Int8Factor behind an opaque handle, the int8 sketched and full-rank GEMMs.
// Each entry point converts and checks its C arguments, then calls the one C++ entry point.
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "c_api/c_api_common.hpp"
#include "detail/check.hpp"
#include "sketchcore/errors.hpp"
#include "sketchcore/int8_matmul.hpp"
#include "sketchcore/sketched_matmul.hpp"

/// The opaque int8 factor: the C++ Int8Factor it owns.
struct sketchcore_int8_factor {
  sketchcore::Int8Factor factor;
};

using sketchcore::c_api::guarded;
using sketchcore::c_api::Matrix;
using sketchcore::c_api::require;
using sketchcore::c_api::to_epilogue;
using sketchcore::c_api::to_matrix;
using sketchcore::c_api::to_view;

namespace {

const sketchcore::Int8Factor& factor_of(const sketchcore_int8_factor* f, const char* op, const char* name) {
  require(f, op, name);
  return f->factor;
}

template <class T>
T& at(const Matrix& m, std::int64_t i, std::int64_t j) {
  return static_cast<T*>(m.data)[i * m.row_stride + j * m.col_stride];
}

void check_cols(const Matrix& scale, std::int64_t cols, const char* op) {
  if (scale.rows != cols) {
    sketchcore::detail::fail<sketchcore::shape_error>(op, "scale.shape[0]", std::to_string(cols) + " (one per column)",
                                                      std::to_string(scale.rows));
  }
}

// The float32 copy of w (float32 or float64, 2-D, CPU), checked finite as the Python quantize_int8 does.
std::vector<float> float32_copy(const sketchcore_tensor* w, const char* op, std::int64_t& rows, std::int64_t& cols) {
  require(w, op, "w");
  const bool is64 = w->dtype == SKETCHCORE_FLOAT64;
  if (w->dtype != SKETCHCORE_FLOAT32 && !is64) {
    sketchcore::detail::fail<sketchcore::dtype_error>(op, "w.dtype", "SKETCHCORE_FLOAT32 (2) or SKETCHCORE_FLOAT64 (3)",
                                                      std::to_string(w->dtype));
  }
  sketchcore_tensor as32 = *w;
  as32.dtype = SKETCHCORE_FLOAT32;  // to_matrix checks the rest (element strides); float64 is read as double below
  const Matrix m = to_matrix(&as32, SKETCHCORE_FLOAT32, 2, op, "w");
  rows = m.rows, cols = m.cols;
  std::vector<float> out(static_cast<std::size_t>(rows * cols));
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < cols; ++j) {
      const float v = is64 ? static_cast<float>(at<double>(m, i, j)) : at<float>(m, i, j);
      if (!std::isfinite(v)) {
        sketchcore::detail::fail<std::invalid_argument>(op, "w", "finite values (in float32)",
                                                        std::to_string(v) + " at index (" + std::to_string(i) +
                                                            ", " + std::to_string(j) + ")");
      }
      out[static_cast<std::size_t>(i * cols + j)] = v;
    }
  }
  return out;
}

}  // namespace

extern "C" {

sketchcore_status sketchcore_sketched_matmul_output_shape(const sketchcore_tensor* x, const sketchcore_tensor* S,
                                                          const sketchcore_tensor* U, int64_t* shape,
                                                          int32_t capacity, int32_t* ndim) {
  return guarded([&] {
    const char* op = "sketchcore_sketched_matmul_output_shape";
    const auto result = sketchcore::sketched_matmul_output_shape(to_view(x, op, "x"), to_view(S, op, "S"),
                                                                 to_view(U, op, "U"));
    sketchcore::c_api::write_shape(result, shape, capacity, ndim, op);
  });
}

sketchcore_status sketchcore_sketched_matmul(const sketchcore_tensor* x, const sketchcore_tensor* S,
                                             const sketchcore_tensor* U, const sketchcore_tensor* out,
                                             const sketchcore_epilogue* epilogue) {
  return guarded([&] {
    const char* op = "sketchcore_sketched_matmul";
    sketchcore::sketched_matmul(to_view(x, op, "x"), to_view(S, op, "S"), to_view(U, op, "U"),
                                to_view(out, op, "out"), to_epilogue(epilogue, op));
  });
}

sketchcore_status sketchcore_int8_quantize(const sketchcore_tensor* w, const sketchcore_tensor* q,
                                           const sketchcore_tensor* scale) {
  return guarded([&] {
    const char* op = "sketchcore_int8_quantize";
    std::int64_t rows = 0, cols = 0;
    const std::vector<float> w32 = float32_copy(w, op, rows, cols);
    const Matrix qm = to_matrix(q, SKETCHCORE_INT8, 2, op, "q");
    const Matrix sm = to_matrix(scale, SKETCHCORE_FLOAT32, 1, op, "scale");
    if (qm.rows != rows || qm.cols != cols) {
      sketchcore::detail::fail<sketchcore::shape_error>(
          op, "q", "shape (" + std::to_string(rows) + ", " + std::to_string(cols) + ") (that of w)",
          "shape (" + std::to_string(qm.rows) + ", " + std::to_string(qm.cols) + ")");
    }
    check_cols(sm, cols, op);
    for (std::int64_t j = 0; j < cols; ++j) {
      float max_abs = 0.0f;
      for (std::int64_t i = 0; i < rows; ++i) max_abs = std::fmax(max_abs, std::fabs(w32[i * cols + j]));
      const float s = max_abs == 0.0f ? 1.0f : max_abs / 127.0f;
      for (std::int64_t i = 0; i < rows; ++i) {
        const float v = std::nearbyint(w32[i * cols + j] / s);  // half to even (default rounding mode)
        at<std::int8_t>(qm, i, j) = static_cast<std::int8_t>(std::fmin(127.0f, std::fmax(-127.0f, v)));
      }
      at<float>(sm, j, 0) = s;
    }
  });
}

sketchcore_status sketchcore_int8_factor_create(const sketchcore_tensor* q, const sketchcore_tensor* scale,
                                                sketchcore_int8_factor** factor) {
  if (factor != nullptr) *factor = nullptr;
  return guarded([&] {
    const char* op = "sketchcore_int8_factor_create";
    require(factor, op, "factor");
    const Matrix qm = to_matrix(q, SKETCHCORE_INT8, 2, op, "q");
    const Matrix sm = to_matrix(scale, SKETCHCORE_FLOAT32, 1, op, "scale");
    check_cols(sm, qm.cols, op);
    std::vector<float> scales(static_cast<std::size_t>(qm.cols));
    for (std::int64_t j = 0; j < qm.cols; ++j) scales[static_cast<std::size_t>(j)] = at<float>(sm, j, 0);
    *factor = new sketchcore_int8_factor{sketchcore::Int8Factor(static_cast<const std::int8_t*>(qm.data), qm.rows,
                                                                qm.cols, qm.row_stride, qm.col_stride,
                                                                scales.data())};
  });
}

sketchcore_status sketchcore_int8_factor_destroy(sketchcore_int8_factor* factor) {
  return guarded([&] { delete factor; });
}

sketchcore_status sketchcore_int8_factor_info(const sketchcore_int8_factor* factor, int64_t* rows, int64_t* cols,
                                              int64_t* nbytes) {
  return guarded([&] {
    const sketchcore::Int8Factor& f = factor_of(factor, "sketchcore_int8_factor_info", "factor");
    if (rows != nullptr) *rows = f.rows();
    if (cols != nullptr) *cols = f.cols();
    if (nbytes != nullptr) *nbytes = f.nbytes();
  });
}

sketchcore_status sketchcore_int8_factor_unpack(const sketchcore_int8_factor* factor, const sketchcore_tensor* q,
                                                const sketchcore_tensor* scale) {
  return guarded([&] {
    const char* op = "sketchcore_int8_factor_unpack";
    const sketchcore::Int8Factor& f = factor_of(factor, op, "factor");
    if (q != nullptr) {
      const Matrix qm = to_matrix(q, SKETCHCORE_INT8, 2, op, "q");
      if (qm.rows != f.rows() || qm.cols != f.cols()) {
        sketchcore::detail::fail<sketchcore::shape_error>(
            op, "q", "shape (" + std::to_string(f.rows()) + ", " + std::to_string(f.cols()) + ") (the factor's)",
            "shape (" + std::to_string(qm.rows) + ", " + std::to_string(qm.cols) + ")");
      }
      std::vector<std::int8_t> values(static_cast<std::size_t>(f.rows() * f.cols()));
      f.unpack(values.data());
      for (std::int64_t i = 0; i < f.rows(); ++i) {
        for (std::int64_t j = 0; j < f.cols(); ++j) at<std::int8_t>(qm, i, j) = values[i * f.cols() + j];
      }
    }
    if (scale != nullptr) {
      const Matrix sm = to_matrix(scale, SKETCHCORE_FLOAT32, 1, op, "scale");
      check_cols(sm, f.cols(), op);
      for (std::int64_t j = 0; j < f.cols(); ++j) at<float>(sm, j, 0) = f.scales()[j];
    }
  });
}

sketchcore_status sketchcore_int8_sketched_matmul(const sketchcore_tensor* x, const sketchcore_int8_factor* S,
                                                  const sketchcore_int8_factor* U, const sketchcore_tensor* out,
                                                  const sketchcore_epilogue* epilogue) {
  return guarded([&] {
    const char* op = "sketchcore_int8_sketched_matmul";
    sketchcore::int8_sketched_matmul(to_view(x, op, "x"), factor_of(S, op, "S"), factor_of(U, op, "U"),
                                     to_view(out, op, "out"), to_epilogue(epilogue, op));
  });
}

sketchcore_status sketchcore_int8_matmul(const sketchcore_tensor* x, const sketchcore_int8_factor* W,
                                         const sketchcore_tensor* out, const sketchcore_epilogue* epilogue) {
  return guarded([&] {
    const char* op = "sketchcore_int8_matmul";
    sketchcore::int8_matmul(to_view(x, op, "x"), factor_of(W, op, "W"), to_view(out, op, "out"),
                            to_epilogue(epilogue, op));
  });
}

}  // extern "C"
