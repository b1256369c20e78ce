// CPU backend of the sketched GEMM's backward: with G = dL/dy ⊙ keep/(1 − p) ⊙ act′(H),
// H = scale·Z·Up + bias recomputed where an activation needs it,
//   dUp = scale·Zᵀ·G,  dSp = scale·Xᵀ·(G·Upᵀ),  dX = scale·(G·Upᵀ)·Spᵀ,  dbias = Σ_rows G,
// over chunks of rows, the factors' gradients accumulating across the chunks (the math:
// DESIGN.md). 16-bit x, dL/dy, Z and dx are widened or rounded chunk by chunk.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <type_traits>

#include "cpu/cpu_ops.hpp"
#include "cpu/gemm_bf16.hpp"
#include "cpu/half.hpp"
#include "cpu/matmul_factors.hpp"
#include "detail/blas.hpp"
#include "detail/epilogue_cpu.hpp"
#include "detail/parallel.hpp"
#include "detail/scratch.hpp"
#include "detail/strided.hpp"

namespace sketchcore::detail {

namespace {

/// The per-chunk buffers (staged dL/dy, G) stay within this; smaller than the forward's
/// because a training step's peak memory matters and its GEMMs accumulate over chunks anyway.
constexpr std::int64_t kBackwardStagingBytes = std::int64_t{4} << 20;

/// Sets every element of `v` to zero.
template <class T>
void fill_zero(const TensorView& v) {
  if (v.numel() == 0) return;
  Scratch<T> zeros(as_row_matrix(v).cols);
  std::fill(zeros.data(), zeros.data() + as_row_matrix(v).cols, T(0));
  for (std::int64_t i = 0, rows = as_row_matrix(v).rows; i < rows; ++i) scatter_rows<T>(zeros.data(), 0, v, i, i + 1);
}

template <class T>
class BackwardExecutor {
 public:
  BackwardExecutor(const SketchedMatmulProblem& p, const SketchedMatmulGradients& g, HalfFactors half)
      : p_(p), g_(g), r_(p.terms * p.rank), epilogue_(resolve_epilogue<T>(p.epilogue)), half_(half) {}

  void run() {
    const std::int64_t rows = p_.rows, d_out = p_.d_out, d_in = p_.d_in;
    if (rows == 0 || d_out == 0 || r_ == 0 || d_in == 0) {
      // Empty products: gradients of the factors are zero; dx is zero; dbias may still
      // receive the gradient of act(bias) when rows > 0 (Z = 0).
      if (g_.x) fill_zero<T>(*g_.x);
      if (g_.S) fill_zero<T>(*g_.S);
      if (g_.U) fill_zero<T>(*g_.U);
      if (g_.bias) {
        if (rows == 0 || d_out == 0) {
          fill_zero<T>(*g_.bias);
        } else {
          bias_only();
        }
      }
      return;
    }
    Scratch<T> s_scratch, u_scratch, dsp, dup, dbias, ones;
    const MatrixOperand<T> sp = first_factor<T>(p_, p_.rows, s_scratch, /*allow_batched=*/false).sp;
    const MatrixOperand<T> up = whole_operand<T>(p_.U, u_scratch);
    // 16-bit x, dL/dy, Z and dx (cpu_backend.cpp passes them unwidened) are widened, or dx
    // rounded, chunk by chunk below: never a full-size float32 copy.
    const bool half_z = is_half(p_.intermediate->dtype());
    const RowMatrix zm = as_row_matrix(*p_.intermediate);
    const std::int64_t ldz = half_z ? r_ : rows > 1 ? *zm.row_stride : std::max<std::int64_t>(r_, 1);
    const auto* z_base = half_z ? nullptr : static_cast<const T*>(p_.intermediate->data());
    std::optional<MatrixOperand<T>> x_in_place, dy_in_place;
    if (!is_half(p_.x.dtype())) x_in_place = operand_in_place<T>(p_.x);
    if (!is_half(p_.out.dtype())) dy_in_place = operand_in_place<T>(p_.out);
    std::optional<MatrixOperand<T>> dx_in_place;
    if (g_.x && !is_half(g_.x->dtype())) {
      if (auto o = operand_in_place<T>(*g_.x); o && !o->transposed) dx_in_place = o;
    }
    const bool needs_h = p_.epilogue.activation != Activation::none;
    const bool transform = needs_h || epilogue_.dropout.enabled;
    // Rows per chunk: the chunk's G (n × d_out) within the staging budget, and its staged x or
    // dx rows (n × d_in) too when they cannot be used in place (16-bit, or strided).
    const bool stages_x = (g_.S && !x_in_place) || (g_.x && !dx_in_place);
    const std::int64_t widest = stages_x ? std::max(d_out, d_in) : d_out;
    const std::int64_t chunk =
        std::clamp<std::int64_t>(kBackwardStagingBytes / (widest * std::int64_t(sizeof(T))), 256, rows);
    if (g_.bias) {
      T* one = ones.allocate(chunk);
      std::fill(one, one + chunk, T(1));
      dbias.allocate(d_out);
    }
    // Only the requested terms: columns [s_first, s_first + s_width) of G·Upᵀ give dSp,
    // rows [u_first, u_first + u_width) of Zᵀ·G give dUp.
    const std::int64_t s_first = g_.S_terms.begin * p_.rank, s_width = (g_.S_terms.end - g_.S_terms.begin) * p_.rank;
    const std::int64_t u_first = g_.U_terms.begin * p_.rank, u_width = (g_.U_terms.end - g_.U_terms.begin) * p_.rank;
    // dUp and dSp accumulate over the chunks directly in the destinations when their
    // layouts are BLAS matrices, else in pooled buffers copied out at the end.
    std::optional<MatrixOperand<T>> du_direct, ds_direct;
    if (g_.U) {
      if (auto o = operand_in_place<T>(*g_.U); o && !o->transposed) du_direct = o;
      if (!du_direct) dup.allocate(u_width * d_out);
    }
    if (g_.S) {
      const TensorView& gs = *g_.S;
      if (const auto cs = sketch_column_stride(gs, p_.rank)) {
        if (auto o = operand_in_place(static_cast<const T*>(gs.data()), d_in, s_width, gs.stride(-2), *cs);
            o && !o->transposed) {
          ds_direct = o;
        }
      }
      if (!ds_direct) dsp.allocate(d_in * s_width);
    }
    T* const du = du_direct ? const_cast<T*>(du_direct->data) : dup.data();
    const std::int64_t ld_du = du_direct ? du_direct->ld : d_out;
    T* const ds = ds_direct ? const_cast<T*>(ds_direct->data) : dsp.data();
    const std::int64_t ld_ds = ds_direct ? ds_direct->ld : s_width;
    const T scale = static_cast<T>(p_.epilogue.scale);
    // bfloat16 dL/dy, Z and U with no activation or dropout: G = dL/dy, and dbias, dUp and G·Upᵀ
    // take the 16-bit values as they are (the native GEMM; nothing widened).
    const std::optional<NativeOperands> native = transform ? std::nullopt : native_operands();
    for (std::int64_t begin = 0; begin < rows; begin += chunk) {
      const std::int64_t end = std::min(rows, begin + chunk), n = end - begin;
      const T beta = begin == 0 ? T(0) : T(1);
      // G·Upᵀ: all r columns for dx, else only the ones dS needs (stored from column 0).
      const std::int64_t gu_first = g_.x ? 0 : s_first, gu_width = g_.x ? r_ : s_width;
      Scratch<T> x_staged, gu, dx_staged;
      T* const gup = g_.S || g_.x ? gu.allocate(n * gu_width) : nullptr;
      if constexpr (std::is_same_v<T, float>) {
        if (native) {
          const Bf16Operand dy = rows_from<std::uint16_t>(native->dy, begin);
          if (g_.bias) bfloat16_column_sums(dy.data, dy.ld, n, d_out, dbias.data(), begin > 0);
          if (g_.U && u_width > 0) {
            gemm_bf16(u_width, d_out, n, scale, transposed(cols_from<std::uint16_t>(rows_from<std::uint16_t>(native->z, begin), u_first)),
                      dy, du, ld_du, beta);
          }
          if (gup && gu_width > 0) {
            gemm_bf16(n, gu_width, d_out, 1.0f, dy, transposed(rows_from<std::uint16_t>(native->up, gu_first)), gup, gu_width);
          }
        }
      }
      if (!native) {
        Scratch<T> g_buffer, dy_staged, z_staged;
        const T* z_rows = z_base ? z_base + begin * ldz : nullptr;
        if (half_z) {
          gather_rows_parallel<T>(*p_.intermediate, begin, end, z_staged.allocate(n * r_));
          z_rows = z_staged.data();
        }
        const MatrixOperand<T> zc{z_rows, false, ldz};
        // G for this chunk (n × d_out).
        MatrixOperand<T> gc;
        const T* dy = nullptr;
        std::int64_t ld_dy = d_out;
        if (dy_in_place && !dy_in_place->transposed) {
          dy = dy_in_place->data + begin * dy_in_place->ld;
          ld_dy = dy_in_place->ld;
        } else {
          gather_rows_parallel<T>(p_.out, begin, end, dy_staged.allocate(n * d_out));
          dy = dy_staged.data();
        }
        if (transform) {
          T* g = g_buffer.allocate(n * d_out);
          if (needs_h) gemm<T>(n, d_out, r_, scale, zc, up, g, d_out);  // H without the bias
          const std::int64_t grain = std::max<std::int64_t>(1, (std::int64_t{1} << 15) / d_out);
          parallel_for(n, grain, [&](std::int64_t b, std::int64_t e) {
            apply_epilogue_backward<T>(dy + b * ld_dy, ld_dy, g + b * d_out, d_out, e - b, d_out, begin + b, epilogue_);
          });
          gc = {g, false, d_out};
        } else {
          gc = {dy, false, ld_dy};
        }
        if (g_.bias) {
          gemm<T>(1, d_out, n, T(1), {ones.data(), false, n}, gc, dbias.data(), d_out, beta);
        }
        if (g_.U && u_width > 0) {
          gemm<T>(u_width, d_out, n, scale, transposed(MatrixOperand<T>{zc.data + u_first, false, ldz}), gc, du, ld_du, beta);
        }
        if (gup && gu_width > 0) gemm<T>(n, gu_width, d_out, T(1), gc, transposed(rows_from<T>(up, gu_first)), gup, gu_width);
      }
      if (g_.S) {
        MatrixOperand<T> xc;
        if (x_in_place) {
          xc = rows_from<T>(*x_in_place, begin);
        } else {
          gather_rows_parallel<T>(p_.x, begin, end, x_staged.allocate(n * d_in));
          xc = {x_staged.data(), false, d_in};
        }
        if (s_width > 0) {
          gemm<T>(d_in, s_width, n, scale, transposed(xc), {gup + s_first - gu_first, false, gu_width}, ds, ld_ds,
                  beta);
        }
      }
      if (g_.x) {
        T* dx = dx_in_place ? const_cast<T*>(dx_in_place->data) + begin * dx_in_place->ld : dx_staged.allocate(n * d_in);
        const std::int64_t ldx = dx_in_place ? dx_in_place->ld : d_in;
        gemm<T>(n, d_in, r_, scale, {gup, false, gu_width}, transposed(sp), dx, ldx);
        if (!dx_in_place) scatter_rows<T>(dx, ldx, *g_.x, begin, end);
      }
    }
    if (g_.bias) scatter_rows<T>(dbias.data(), d_out, as_vector_row(*g_.bias), 0, 1);
    if (g_.U && !du_direct) scatter_rows<T>(dup.data(), d_out, *g_.U, 0, u_width);  // (terms, k, d_out) rows
    if (g_.S && !ds_direct) unpack_sketch_gradient(dsp.data(), s_width);
  }

 private:
  /// The bfloat16 dL/dy (row-major rows), Z and Up of a native backward (see run).
  struct NativeOperands {
    Bf16Operand dy, z, up;
  };

  /// The native operands where the problem is bfloat16, the CPU has the native GEMM and dL/dy,
  /// Z and U are BLAS operands in place; else nullopt (the float32 path).
  std::optional<NativeOperands> native_operands() const {
    if (!std::is_same_v<T, float> || !half_.U || p_.out.dtype() != DType::bfloat16 ||
        p_.intermediate->dtype() != DType::bfloat16 || half_.U->dtype() != DType::bfloat16 || !gemm_bf16_available()) {
      return std::nullopt;
    }
    const auto dy = operand_in_place<std::uint16_t>(p_.out);
    const auto z = operand_in_place<std::uint16_t>(*p_.intermediate);
    const auto up = operand_in_place<std::uint16_t>(*half_.U);
    if (!dy || dy->transposed || !z || !up) return std::nullopt;
    return NativeOperands{*dy, *z, *up};
  }

  /// d_in = 0 or r = 0: Z = 0, so H = bias and dbias = Σ_rows dy ⊙ keep/(1 − p) ⊙ act′(bias).
  void bias_only() {
    const std::int64_t rows = p_.rows, d_out = p_.d_out;
    Scratch<T> g(rows * d_out), dy(rows * d_out), sums(d_out);
    gather_rows<T>(p_.out, 0, rows, dy.data());
    std::fill(g.data(), g.data() + rows * d_out, T(0));
    apply_epilogue_backward<T>(dy.data(), d_out, g.data(), d_out, rows, d_out, 0, epilogue_);
    std::fill(sums.data(), sums.data() + d_out, T(0));
    for (std::int64_t i = 0; i < rows; ++i) {
      for (std::int64_t j = 0; j < d_out; ++j) sums.data()[j] += g.data()[i * d_out + j];
    }
    scatter_rows<T>(sums.data(), d_out, as_vector_row(*g_.bias), 0, 1);
  }

  /// A 1-D view seen as one row.
  static TensorView as_vector_row(const TensorView& v) {
    return TensorView(v.data(), v.dtype(), {1, v.size(0)}, {0, v.stride(0)}, v.device());
  }

  /// dSp (d_in × width, row-major) into grad S of shape (d_in, k) or (terms, d_in, k).
  void unpack_sketch_gradient(const T* dsp, std::int64_t width) {
    const TensorView& gs = *g_.S;
    auto* base = static_cast<T*>(gs.data());
    const bool three = gs.ndim() == 3;
    const std::int64_t ts = three ? gs.stride(0) : 0, is = gs.stride(-2), js = gs.stride(-1);
    for (std::int64_t t = 0; t < width / std::max<std::int64_t>(p_.rank, 1); ++t) {
      for (std::int64_t i = 0; i < p_.d_in; ++i) {
        for (std::int64_t j = 0; j < p_.rank; ++j) base[t * ts + i * is + j * js] = dsp[i * width + t * p_.rank + j];
      }
    }
  }

  const SketchedMatmulProblem& p_;
  const SketchedMatmulGradients& g_;
  const std::int64_t r_;
  const EpilogueArgs<T> epilogue_;
  const HalfFactors half_;
};

}  // namespace

void cpu_sketched_matmul_backward(const SketchedMatmulProblem& p, const SketchedMatmulGradients& g, HalfFactors half) {
  if (p.x.dtype() == DType::float64) {
    BackwardExecutor<double>(p, g, half).run();
  } else {
    BackwardExecutor<float>(p, g, half).run();
  }
}

}  // namespace sketchcore::detail
