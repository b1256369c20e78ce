// CPU backend of the sketched GEMM: Y = act(scale · (X · Sp) · Up + bias) as two BLAS
// GEMMs, where Sp = [S_1 … S_T] (d_in × r) and Up = [U_1; …; U_T] (r × d_out), r = T·k.
// Operands are used in place whenever BLAS can read them; otherwise they are packed.
#include <algorithm>
#include <cstring>

#include "detail/backend.hpp"
#include "detail/blas.hpp"
#include "detail/epilogue_cpu.hpp"
#include "detail/parallel.hpp"
#include "detail/scratch.hpp"
#include "detail/strided.hpp"

namespace sketchcore::detail {

namespace {

/// X (rows × d_in): in place when its rows collapse to a BLAS layout, else packed.
template <class T>
BlasMatrix<T> input_operand(const TensorView& x, Scratch<T>& scratch) {
  const RowMatrix m = as_row_matrix(x);
  if (auto op = blas_operand<T>(x, m)) return *op;
  gather_rows<T>(x, scratch.allocate(m.rows * m.cols));
  return {scratch.data(), false, std::max<std::int64_t>(m.cols, 1)};
}

/// Sp = [S_1 … S_T] (d_in × T·k). In place when the (T, k) columns collapse into one
/// stride (always for T = 1), else packed term by term.
template <class T>
BlasMatrix<T> sketch_operand(const SketchedMatmulProblem& p, Scratch<T>& scratch) {
  const TensorView& S = p.S;
  const std::int64_t r = p.terms * p.rank;
  const auto* base = static_cast<const T*>(S.data());
  const std::int64_t row_stride = S.stride(-2);
  std::int64_t col_stride = S.stride(-1);
  bool columns_collapse = true;
  if (S.ndim() == 3 && p.terms > 1) {
    if (p.rank == 1) {
      col_stride = S.stride(0);
    } else {
      columns_collapse = S.stride(0) == p.rank * S.stride(-1);
    }
  }
  if (columns_collapse) {
    if (auto op = blas_operand(base, p.d_in, r, row_stride, col_stride)) return *op;
  }
  T* dst = scratch.allocate(p.d_in * r);
  const std::int64_t term_stride = S.ndim() == 3 ? S.stride(0) : 0, cs = S.stride(-1);
  const std::int64_t grain = std::max<std::int64_t>(1, (std::int64_t{1} << 16) / std::max<std::int64_t>(r, 1));
  parallel_for(p.d_in, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      for (std::int64_t t = 0; t < p.terms; ++t) {
        const T* src = base + t * term_stride + i * row_stride;
        T* out = dst + i * r + t * p.rank;
        if (cs == 1) {
          std::memcpy(out, src, static_cast<std::size_t>(p.rank) * sizeof(T));
        } else {
          for (std::int64_t j = 0; j < p.rank; ++j) out[j] = src[j * cs];
        }
      }
    }
  });
  return {dst, false, std::max<std::int64_t>(r, 1)};
}

template <class T>
void run(const SketchedMatmulProblem& p) {
  const std::int64_t rows = p.rows, d_out = p.d_out, r = p.terms * p.rank;
  if (rows == 0 || d_out == 0) return;

  // Where the GEMM writes: straight into `out` when it is a row-major matrix, else into a
  // compact temporary that is scattered into `out` at the end.
  Scratch<T> y_scratch;
  T* y = nullptr;
  std::int64_t ldy = d_out;
  const RowMatrix om = as_row_matrix(p.out);
  const auto out_op = blas_operand<T>(p.out, om);
  const bool direct = out_op && !out_op->transposed;
  if (direct) {
    y = static_cast<T*>(p.out.data());
    ldy = out_op->ld;
  } else {
    y = y_scratch.allocate(rows * d_out);
  }

  if (r == 0 || p.d_in == 0) {
    // An empty sum: the product is zero and only the epilogue remains.
    for (std::int64_t i = 0; i < rows; ++i) std::fill(y + i * ldy, y + i * ldy + d_out, T(0));
  } else {
    Scratch<T> x_scratch, s_scratch, u_scratch;
    const BlasMatrix<T> x_op = input_operand<T>(p.x, x_scratch);
    const BlasMatrix<T> s_op = sketch_operand<T>(p, s_scratch);
    const BlasMatrix<T> u_op = input_operand<T>(p.U, u_scratch);  // (T, k, d_out) rows collapse to r × d_out
    Scratch<T> z(rows * r);
    gemm<T>(rows, r, p.d_in, T(1), x_op, s_op, z.data(), r);
    gemm<T>(rows, d_out, r, static_cast<T>(p.epilogue.scale), BlasMatrix<T>{z.data(), false, r}, u_op, y, ldy);
  }

  const T* bias = p.epilogue.bias ? static_cast<const T*>(p.epilogue.bias->data()) : nullptr;
  const std::int64_t bias_stride = p.epilogue.bias ? p.epilogue.bias->stride(0) : 0;
  apply_epilogue<T>(y, rows, d_out, ldy, bias, bias_stride, p.epilogue.activation);
  if (!direct) scatter_rows<T>(y, p.out);
}

class CpuBackend final : public Backend {
 public:
  void sketched_matmul(const SketchedMatmulProblem& p) const override {
    if (p.x.dtype() == DType::float64) {
      run<double>(p);
    } else {
      run<float>(p);
    }
  }
};

}  // namespace

const Backend& cpu_backend() {
  static const CpuBackend backend;
  return backend;
}

}  // namespace sketchcore::detail
