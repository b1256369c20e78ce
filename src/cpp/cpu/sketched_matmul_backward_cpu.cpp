// CPU backend of the sketched GEMM's backward: with A = σ(Z) recomputed from the saved Z for
// an inner activation (else A = Z), G = dL/dy ⊙ keep/(1 − p) ⊙ act′(H), H = scale·A·Up + bias
// recomputed where an activation needs it, and D = (G·Upᵀ) ⊙ σ′(Z) (D = G·Upᵀ without σ),
//   dUp = scale·Aᵀ·G,  dSp = scale·Xᵀ·D,  dX = scale·D·Spᵀ,  dbias = Σ_rows G,
// over chunks of rows, the factors' gradients accumulating across the chunks (the math:
// DESIGN.md). 16-bit x, dL/dy, Z and dx are widened or rounded chunk by chunk. Where the CPU has
// the native bfloat16 GEMM (cpu/gemm_bf16.hpp) and the problem is bfloat16, the products of two
// bfloat16 operands take them as they are: all of them without activation or dropout, G·Upᵀ
// (G = dL/dy) with only an inner activation.
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

/// Bound of a chunk's r-wide buffers (G·Upᵀ and σ(Z)) where nothing full-width is staged: no
/// more than the saved intermediate Z itself up to this size.
constexpr std::int64_t kRankWideBytes = std::int64_t{32} << 20;

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
    prepare();
    for (std::int64_t begin = 0; begin < rows; begin += chunk_) {
      const std::int64_t end = std::min(rows, begin + chunk_), n = end - begin;
      Scratch<T> gu;
      T* const gup = g_.S || g_.x ? gu.allocate(n * gu_width_) : nullptr;
      if (native_) {
        native_products(begin, end, gup);
      } else {
        float_products(begin, end, gup);
      }
      if (g_.S) sketch_gradient(begin, end, gup);
      if (g_.x) input_gradient(begin, end, gup);
    }
    if (g_.bias) scatter_rows<T>(dbias_.data(), d_out, as_vector_row(*g_.bias), 0, 1);
    if (g_.U && !du_direct_) scatter_rows<T>(dup_.data(), d_out, *g_.U, 0, u_width_);  // (terms, k, d_out) rows
    if (g_.S && !ds_direct_) unpack_sketch_gradient(dsp_.data(), s_width_);
  }

 private:
  /// The factors as operands, which operands are read in place, the chunk size, and where dUp,
  /// dSp and dbias accumulate over the chunks.
  void prepare() {
    const std::int64_t rows = p_.rows, d_out = p_.d_out, d_in = p_.d_in;
    sp_ = first_factor<T>(p_, p_.rows, s_scratch_, /*allow_batched=*/false).sp;
    up_ = whole_operand<T>(p_.U, u_scratch_);
    // 16-bit x, dL/dy, Z and dx (cpu_backend.cpp passes them unwidened) are widened, or dx
    // rounded, chunk by chunk: never a full-size float32 copy.
    half_z_ = is_half(p_.intermediate->dtype());
    const RowMatrix zm = as_row_matrix(*p_.intermediate);
    ldz_ = half_z_ ? r_ : rows > 1 ? *zm.row_stride : std::max<std::int64_t>(r_, 1);
    z_base_ = half_z_ ? nullptr : static_cast<const T*>(p_.intermediate->data());
    if (!is_half(p_.x.dtype())) x_in_place_ = operand_in_place<T>(p_.x);
    if (!is_half(p_.out.dtype())) dy_in_place_ = operand_in_place<T>(p_.out);
    if (g_.x && !is_half(g_.x->dtype())) {
      if (auto o = operand_in_place<T>(*g_.x); o && !o->transposed) dx_in_place_ = o;
    }
    needs_h_ = p_.epilogue.activation != Activation::none;
    inner_ = p_.epilogue.inner_activation != Activation::none;
    const bool transform = needs_h_ || epilogue_.dropout.enabled || inner_;
    // Rows per chunk: the chunk's G (n × d_out) within the staging budget, and its staged x or
    // dx rows (n × d_in) too when they cannot be used in place (16-bit, or strided).
    const bool stages_x = (g_.S && !x_in_place_) || (g_.x && !dx_in_place_);
    const std::int64_t widest = stages_x ? std::max(d_out, d_in) : d_out;
    chunk_ = std::clamp<std::int64_t>(kBackwardStagingBytes / (widest * std::int64_t(sizeof(T))), 256, rows);
    // Nothing staged at full width (dL/dy, x and dx read in place, no G to form): a chunk's own
    // buffers are only r wide (G·Upᵀ, σ(Z)), so chunks grow up to kRankWideBytes each. Fewer,
    // larger GEMMs: each chunk costs every GEMM a fork/join of the BLAS threads.
    const bool stages_full_width = needs_h_ || epilogue_.dropout.enabled || stages_x || half_z_ || !dy_in_place_ ||
                                   dy_in_place_->transposed;
    if (!stages_full_width) {
      const std::int64_t rank_wide = kRankWideBytes / (std::max<std::int64_t>(r_, 1) * std::int64_t(sizeof(T)));
      chunk_ = std::max(chunk_, std::min(rows, rank_wide));
    }
    if (g_.bias) {
      T* one = ones_.allocate(chunk_);
      std::fill(one, one + chunk_, T(1));
      dbias_.allocate(d_out);
    }
    // Only the requested terms: columns [s_first, s_first + s_width) of G·Upᵀ give dSp,
    // rows [u_first, u_first + u_width) of Zᵀ·G give dUp; G·Upᵀ keeps all r columns for dx,
    // else only the ones dS needs (stored from column 0).
    s_first_ = g_.S_terms.begin * p_.rank;
    s_width_ = (g_.S_terms.end - g_.S_terms.begin) * p_.rank;
    u_first_ = g_.U_terms.begin * p_.rank;
    u_width_ = (g_.U_terms.end - g_.U_terms.begin) * p_.rank;
    gu_first_ = g_.x ? 0 : s_first_;
    gu_width_ = g_.x ? r_ : s_width_;
    // dUp and dSp accumulate over the chunks directly in the destinations when their
    // layouts are BLAS matrices, else in pooled buffers copied out at the end.
    if (g_.U) {
      if (auto o = operand_in_place<T>(*g_.U); o && !o->transposed) du_direct_ = o;
      if (!du_direct_) dup_.allocate(u_width_ * d_out);
    }
    if (g_.S) {
      const TensorView& gs = *g_.S;
      if (const auto cs = sketch_column_stride(gs, p_.rank)) {
        if (auto o = operand_in_place(static_cast<const T*>(gs.data()), d_in, s_width_, gs.stride(-2), *cs);
            o && !o->transposed) {
          ds_direct_ = o;
        }
      }
      if (!ds_direct_) dsp_.allocate(d_in * s_width_);
    }
    du_ = du_direct_ ? const_cast<T*>(du_direct_->data) : dup_.data();
    ld_du_ = du_direct_ ? du_direct_->ld : d_out;
    ds_ = ds_direct_ ? const_cast<T*>(ds_direct_->data) : dsp_.data();
    ld_ds_ = ds_direct_ ? ds_direct_->ld : s_width_;
    scale_ = static_cast<T>(p_.epilogue.scale);
    // bfloat16 dL/dy, Z and U with no activation or dropout: G = dL/dy, and dbias, dUp and G·Upᵀ
    // take the 16-bit values as they are (the native GEMM; nothing widened).
    if (!transform) native_ = native_operands();
    // Only an inner activation: G = dL/dy still, so G·Upᵀ (both bfloat16) stays native.
    if (transform && !needs_h_ && !epilogue_.dropout.enabled) native_gu_ = native_operands();
  }

  /// Rows [begin, end) in the native bfloat16 GEMM: dbias and dUp accumulated, G·Upᵀ into gup.
  void native_products(std::int64_t begin, std::int64_t end, T* gup) {
    if constexpr (std::is_same_v<T, float>) {
      const std::int64_t n = end - begin, d_out = p_.d_out;
      const float beta = begin == 0 ? 0.0f : 1.0f;
      const Bf16Operand dy = rows_from<std::uint16_t>(native_->dy, begin);
      if (g_.bias) bfloat16_column_sums(dy.data, dy.ld, n, d_out, dbias_.data(), begin > 0);
      if (g_.U && u_width_ > 0) {
        const Bf16Operand z = cols_from<std::uint16_t>(rows_from<std::uint16_t>(native_->z, begin), u_first_);
        gemm_bf16(u_width_, d_out, n, scale_, transposed(z), dy, du_, ld_du_, beta);
      }
      if (gup && gu_width_ > 0) {
        gemm_bf16(n, gu_width_, d_out, 1.0f, dy, transposed(rows_from<std::uint16_t>(native_->up, gu_first_)), gup,
                  gu_width_);
      }
    }
  }

  /// Rows [begin, end) in BLAS: G (dL/dy, or dL/dy through the epilogue's gradient), dbias and dUp
  /// accumulated, G·Upᵀ into gup.
  void float_products(std::int64_t begin, std::int64_t end, T* gup) {
    const std::int64_t n = end - begin, d_out = p_.d_out;
    const T beta = begin == 0 ? T(0) : T(1);
    Scratch<T> g_buffer, dy_staged, z_staged;
    const T* z_rows = z_base_ ? z_base_ + begin * ldz_ : nullptr;
    if (half_z_) {
      gather_rows_parallel<T>(*p_.intermediate, begin, end, z_staged.allocate(n * r_));
      z_rows = z_staged.data();
    }
    const MatrixOperand<T> zc{z_rows, false, ldz_};
    const T* dy = nullptr;
    std::int64_t ld_dy = d_out;
    if (dy_in_place_ && !dy_in_place_->transposed) {
      dy = dy_in_place_->data + begin * dy_in_place_->ld;
      ld_dy = dy_in_place_->ld;
    } else {
      gather_rows_parallel<T>(p_.out, begin, end, dy_staged.allocate(n * d_out));
      dy = dy_staged.data();
    }
    // A = σ(Z), recomputed from the saved pre-activation Z (A = Z without an inner activation).
    Scratch<T> activated;
    MatrixOperand<T> ac = zc;
    if (inner_) {
      inner_activation_forward<T>(p_.epilogue.inner_activation, zc.data, ldz_, activated.allocate(n * r_), r_, n, r_);
      ac = {activated.data(), false, r_};
    }
    MatrixOperand<T> gc{dy, false, ld_dy};  // G for this chunk (n × d_out)
    if (needs_h_ || epilogue_.dropout.enabled) {
      T* g = g_buffer.allocate(n * d_out);
      if (needs_h_) gemm<T>(n, d_out, r_, scale_, ac, up_, g, d_out);  // H without the bias
      const std::int64_t grain = std::max<std::int64_t>(1, (std::int64_t{1} << 15) / d_out);
      parallel_for(n, grain, [&](std::int64_t b, std::int64_t e) {
        apply_epilogue_backward<T>(dy + b * ld_dy, ld_dy, g + b * d_out, d_out, e - b, d_out, begin + b, epilogue_);
      });
      gc = {g, false, d_out};
    }
    if (g_.bias) gemm<T>(1, d_out, n, T(1), {ones_.data(), false, n}, gc, dbias_.data(), d_out, beta);
    if (g_.U && u_width_ > 0) {
      gemm<T>(u_width_, d_out, n, scale_, transposed(MatrixOperand<T>{ac.data + u_first_, false, ac.ld}), gc, du_,
              ld_du_, beta);
    }
    if (gup && gu_width_ > 0) {
      if (!native_gu_products(begin, n, gup)) {
        gemm<T>(n, gu_width_, d_out, T(1), gc, transposed(rows_from<T>(up_, gu_first_)), gup, gu_width_);
      }
      // (G·Upᵀ) ⊙ σ′(Z) on the columns kept: dSp and dx then follow as without σ.
      if (inner_) inner_activation_backward<T>(p_.epilogue.inner_activation, zc.data + gu_first_, ldz_, gup, gu_width_,
                                               n, gu_width_);
    }
  }

  /// gup = G·Upᵀ for the n rows from `begin` in the native GEMM where G is the bfloat16 dL/dy
  /// (native_gu_); false (nothing done) elsewhere.
  bool native_gu_products(std::int64_t begin, std::int64_t n, T* gup) {
    if constexpr (std::is_same_v<T, float>) {
      if (!native_gu_) return false;
      gemm_bf16(n, gu_width_, p_.d_out, 1.0f, rows_from<std::uint16_t>(native_gu_->dy, begin),
                transposed(rows_from<std::uint16_t>(native_gu_->up, gu_first_)), gup, gu_width_);
      return true;
    }
    return false;
  }

  /// dSp += scale · X[begin, end)ᵀ · (G·Upᵀ)[:, S's columns].
  void sketch_gradient(std::int64_t begin, std::int64_t end, const T* gup) {
    const std::int64_t n = end - begin, d_in = p_.d_in;
    Scratch<T> x_staged;
    MatrixOperand<T> xc;
    if (x_in_place_) {
      xc = rows_from<T>(*x_in_place_, begin);
    } else {
      gather_rows_parallel<T>(p_.x, begin, end, x_staged.allocate(n * d_in));
      xc = {x_staged.data(), false, d_in};
    }
    if (s_width_ > 0) {
      gemm<T>(d_in, s_width_, n, scale_, transposed(xc), {gup + s_first_ - gu_first_, false, gu_width_}, ds_, ld_ds_,
              begin == 0 ? T(0) : T(1));
    }
  }

  /// dX[begin, end) = scale · (G·Upᵀ) · Spᵀ, written in place or staged and scattered (rounded).
  void input_gradient(std::int64_t begin, std::int64_t end, const T* gup) {
    const std::int64_t n = end - begin, d_in = p_.d_in;
    Scratch<T> dx_staged;
    T* dx = dx_in_place_ ? const_cast<T*>(dx_in_place_->data) + begin * dx_in_place_->ld : dx_staged.allocate(n * d_in);
    const std::int64_t ldx = dx_in_place_ ? dx_in_place_->ld : d_in;
    gemm<T>(n, d_in, r_, scale_, {gup, false, gu_width_}, transposed(sp_), dx, ldx);
    if (!dx_in_place_) scatter_rows<T>(dx, ldx, *g_.x, begin, end);
  }

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
  // Set by prepare() for the chunks.
  Scratch<T> s_scratch_, u_scratch_, dsp_, dup_, dbias_, ones_;
  MatrixOperand<T> sp_{nullptr, false, 1}, up_{nullptr, false, 1};
  bool half_z_ = false, needs_h_ = false, inner_ = false;  // inner_: σ on the intermediate
  std::int64_t ldz_ = 1, chunk_ = 1;
  const T* z_base_ = nullptr;
  std::optional<MatrixOperand<T>> x_in_place_, dy_in_place_, dx_in_place_, du_direct_, ds_direct_;
  std::int64_t s_first_ = 0, s_width_ = 0, u_first_ = 0, u_width_ = 0, gu_first_ = 0, gu_width_ = 0;
  T* du_ = nullptr;
  T* ds_ = nullptr;
  std::int64_t ld_du_ = 1, ld_ds_ = 1;
  T scale_ = T(1);
  std::optional<NativeOperands> native_;  // the native bfloat16 path (float only), else empty
  std::optional<NativeOperands> native_gu_;  // G·Upᵀ alone native (an inner activation only)
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
