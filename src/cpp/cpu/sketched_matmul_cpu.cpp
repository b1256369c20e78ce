// CPU backend of the sketched GEMM: Y = epilogue(scale · (X · Sp) · Up), where
// Sp = [S_1 … S_T] (d_in × r) and Up = [U_1; …; U_T] (r × d_out), r = T·k.
//
// Rows are processed in chunks, one after the other: for each chunk the two GEMMs run on
// BLAS's threads, then sketchcore's workers apply the epilogue (bias, activation,
// dropout) to that chunk in one pass. Chunks bound every temporary (Z = X·Sp and, when an
// operand cannot be used in place, the gathered rows of x or the rows of out) by a fixed
// budget, independent of the batch size; every temporary comes from
// host_memory_resource() (detail/scratch.hpp).
//
// Why BLAS threads rather than one BLAS call per thread on row panels (DESIGN.md's
// execution model allows either, as long as the cores are not oversubscribed): measured on 2 cores at 4096 × 4096 → 4096, T·k = 256, per-thread panels were
// 8–15% slower, because every panel GEMM packs all of Sp and Up again; the epilogue pass
// that panels would keep in L2 costs less than that.
//
// With few rows and T > 1 the first product is one batched-strided BLAS call over the
// terms (one GEMM per term where the BLAS has no batched call), so that S need not be
// packed into Sp on every call.
//
// float16/bfloat16 x, out and intermediate (the factors arrive widened: cpu_backend.cpp) go
// through the same chunk staging as strided operands: each chunk of x is widened into the
// staging buffer just before its GEMM, each chunk of y and Z rounded into the caller's
// arrays right after its epilogue, so no full-size float32 copy of them is ever made.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>

#include "cpu/cpu_ops.hpp"
#include "cpu/half.hpp"
#include "detail/blas.hpp"
#include "detail/epilogue_cpu.hpp"
#include "detail/parallel.hpp"
#include "detail/scratch.hpp"
#include "detail/strided.hpp"

namespace sketchcore::detail {

namespace {

/// Budget of the Z = X·Sp chunk, and of gathered x rows / scattered out rows.
constexpr std::int64_t kIntermediateBytes = std::int64_t{4} << 20;
constexpr std::int64_t kStagingBytes = std::int64_t{16} << 20;
/// The backward's per-chunk buffers (staged dL/dy, G) stay within this; smaller than the
/// forward's because a training step's peak memory matters and its GEMMs accumulate over
/// chunks anyway.
constexpr std::int64_t kBackwardStagingBytes = std::int64_t{4} << 20;
/// Smaller chunks than this lose BLAS efficiency (each call packs Sp and Up again).
constexpr std::int64_t kMinChunkRows = 1024;

/// How the product X·Sp is formed.
template <class T>
struct FirstFactor {
  MatrixOperand<T> sp{nullptr, false, 1};   // Sp when it is a matrix (in place or packed)
  bool batched = false;                  // else: one batched call over S_t (d_in × k each)
  MatrixOperand<T> s0{nullptr, false, 1};   // S_0 as a matrix, for the batched call
  std::int64_t term_stride = 0;
};


/// `allow_batched` = false guarantees a matrix Sp (the backward multiplies by Spᵀ).
template <class T>
FirstFactor<T> first_factor(const SketchedMatmulProblem& p, std::int64_t chunk_rows, Scratch<T>& scratch,
                            bool allow_batched = true) {
  const TensorView& S = p.S;
  const std::int64_t r = p.terms * p.rank;
  const auto* base = static_cast<const T*>(S.data());
  FirstFactor<T> f;
  if (const auto cs = sketch_column_stride(p.S, p.rank)) {
    if (auto op = operand_in_place(base, p.d_in, r, S.stride(-2), *cs)) {
      f.sp = *op;
      return f;
    }
  }
  // Packing S costs d_in·r per call; the batched call instead re-reads each chunk of X
  // once per term. With few rows ((T−1)·rows ≤ 2r) re-reading X is the cheaper of the two,
  // unless S is so small (< 64k elements) that packing it is cheaper than the batched
  // call's own overhead.
  if (allow_batched && p.d_in * r >= (std::int64_t{1} << 16) &&
      (p.terms - 1) * chunk_rows <= 2 * r) {
    if (auto op = operand_in_place(base, p.d_in, p.rank, S.stride(-2), S.stride(-1))) {
      f.batched = true;
      f.s0 = *op;
      f.term_stride = S.stride(0);
      return f;
    }
  }
  T* dst = scratch.allocate(p.d_in * r);
  const std::int64_t term_stride = S.ndim() == 3 ? S.stride(0) : 0, cs = S.stride(-1), rs = S.stride(-2);
  // A copy is memory-bound: a second thread only pays off beyond ~1 MiB per chunk.
  const std::int64_t grain = std::max<std::int64_t>(1, (std::int64_t{1} << 18) / std::max<std::int64_t>(r, 1));
  parallel_for(p.d_in, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      T* out = dst + i * r;
      for (std::int64_t t = 0; t < p.terms; ++t) {
        const T* src = base + t * term_stride + i * rs;
        if (cs == 1) {
          for (std::int64_t j = 0; j < p.rank; ++j) out[t * p.rank + j] = src[j];
        } else {
          for (std::int64_t j = 0; j < p.rank; ++j) out[t * p.rank + j] = src[j * cs];
        }
      }
    }
  });
  f.sp = {dst, false, std::max<std::int64_t>(r, 1)};
  return f;
}

/// A matrix operand whose rows can be addressed: in place when possible, else packed.
template <class T>
MatrixOperand<T> whole_operand(const TensorView& v, Scratch<T>& scratch) {
  const RowMatrix m = as_row_matrix(v);
  if (auto op = operand_in_place<T>(v)) return *op;
  pack_rows<T>(v, scratch.allocate(m.rows * m.cols));
  return {scratch.data(), false, std::max<std::int64_t>(m.cols, 1)};
}

template <class T>
class Executor {
 public:
  explicit Executor(const SketchedMatmulProblem& p)
      : p_(p), r_(p.terms * p.rank), epilogue_(resolve_epilogue<T>(p.epilogue)) {
    if (!is_half(p.x.dtype())) x_in_place_ = operand_in_place<T>(p.x);
    if (auto o = operand_in_place<T>(p.out); o && !o->transposed && !is_half(p.out.dtype())) {
      out_in_place_ = MatrixOperand<T>{o->data, false, o->ld};
    }
    half_intermediate_ = p.intermediate && is_half(p.intermediate->dtype());
  }

  void run() {
    const std::int64_t rows = p_.rows;
    if (rows == 0 || p_.d_out == 0) return;
    const std::int64_t chunk = chunk_rows();
    if (r_ > 0 && p_.d_in > 0) {
      factor_ = first_factor<T>(p_, chunk, s_scratch_);
      u_ = whole_operand<T>(p_.U, u_scratch_);  // (T, k, d_out) collapses to r × d_out
    }
    for (std::int64_t begin = 0; begin < rows; begin += chunk) compute_rows(begin, std::min(rows, begin + chunk));
  }

 private:
  /// Rows per chunk: Z within kIntermediateBytes (but at least kMinChunkRows), staged x or
  /// out rows within kStagingBytes.
  std::int64_t chunk_rows() const {
    const auto per_row = [](std::int64_t elements) { return std::max<std::int64_t>(1, elements) * std::int64_t(sizeof(T)); };
    std::int64_t chunk = std::max(kMinChunkRows, kIntermediateBytes / per_row(r_));
    if (!x_in_place_) chunk = std::min(chunk, std::max<std::int64_t>(1, kStagingBytes / per_row(p_.d_in)));
    if (!out_in_place_) chunk = std::min(chunk, std::max<std::int64_t>(1, kStagingBytes / per_row(p_.d_out)));
    return std::min(chunk, p_.rows);
  }

  /// Output rows [begin, end): both products, the epilogue, and the copy-out if `out`
  /// cannot be written in place.
  void compute_rows(std::int64_t begin, std::int64_t end) {
    const std::int64_t n = end - begin, d_out = p_.d_out;
    Scratch<T> y_scratch, x_scratch, z;
    T* y;
    std::int64_t ldy;
    if (out_in_place_) {
      y = const_cast<T*>(out_in_place_->data) + begin * out_in_place_->ld;
      ldy = out_in_place_->ld;
    } else {
      y = y_scratch.allocate(n * d_out);
      ldy = d_out;
    }
    // Z = X·Sp: into the caller's intermediate when the backward will reuse it.
    T* zp = nullptr;
    std::int64_t ldz = std::max<std::int64_t>(r_, 1);
    if (p_.intermediate && !half_intermediate_) {
      const RowMatrix zm = as_row_matrix(*p_.intermediate);
      if (p_.rows > 1) ldz = *zm.row_stride;
      zp = static_cast<T*>(p_.intermediate->data()) + begin * ldz;
    }
    if (r_ == 0 || p_.d_in == 0) {
      for (std::int64_t i = 0; i < n; ++i) std::fill(y + i * ldy, y + i * ldy + d_out, T(0));  // empty sum
      if (p_.intermediate && r_ > 0) {
        if (!zp) zp = z.allocate(n * r_);
        for (std::int64_t i = 0; i < n; ++i) std::fill(zp + i * ldz, zp + i * ldz + r_, T(0));
        if (half_intermediate_) scatter_rows<T>(zp, ldz, *p_.intermediate, begin, end);
      }
    } else {
      MatrixOperand<T> x_rows;
      if (x_in_place_) {
        x_rows = rows_from<T>(*x_in_place_, begin);
      } else {
        T* staged = x_scratch.allocate(n * p_.d_in);
        const std::int64_t grain = std::max<std::int64_t>(1, (std::int64_t{1} << 15) / std::max<std::int64_t>(p_.d_in, 1));
        parallel_for(n, grain, [&](std::int64_t b, std::int64_t e) {
          gather_rows<T>(p_.x, begin + b, begin + e, staged + b * p_.d_in);
        });
        x_rows = {staged, false, std::max<std::int64_t>(p_.d_in, 1)};
      }
      if (!zp) zp = z.allocate(n * r_);
      if (factor_.batched) {
        gemm_batch_strided<T>(n, p_.rank, p_.d_in, x_rows, 0, factor_.s0, factor_.term_stride, zp, ldz, p_.rank,
                              p_.terms);
      } else {
        gemm<T>(n, r_, p_.d_in, T(1), x_rows, factor_.sp, zp, ldz);
      }
      gemm<T>(n, d_out, r_, static_cast<T>(p_.epilogue.scale), MatrixOperand<T>{zp, false, ldz}, u_, y, ldy);
      if (half_intermediate_) scatter_rows<T>(zp, ldz, *p_.intermediate, begin, end);  // Z rounded once
    }
    // The epilogue (and the copy into a strided out) in one parallel pass over the chunk.
    if (epilogue_.active() || !out_in_place_) {
      const std::int64_t grain = std::max<std::int64_t>(1, (std::int64_t{1} << 15) / std::max<std::int64_t>(d_out, 1));
      parallel_for(n, grain, [&](std::int64_t b, std::int64_t e) {
        if (epilogue_.active()) apply_epilogue<T>(y + b * ldy, e - b, d_out, ldy, begin + b, epilogue_);
        if (!out_in_place_) scatter_rows<T>(y + b * ldy, ldy, p_.out, begin + b, begin + e);
      });
    }
  }

  const SketchedMatmulProblem& p_;
  const std::int64_t r_;
  const EpilogueArgs<T> epilogue_;
  std::optional<MatrixOperand<T>> x_in_place_, out_in_place_;
  bool half_intermediate_ = false;  // Z computed in a float32 chunk, then rounded into it
  FirstFactor<T> factor_;
  MatrixOperand<T> u_{nullptr, false, 1};
  Scratch<T> s_scratch_, u_scratch_;
};

/// The transpose of an operand (no copy: the layout flag flips).

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
  BackwardExecutor(const SketchedMatmulProblem& p, const SketchedMatmulGradients& g)
      : p_(p), g_(g), r_(p.terms * p.rank), epilogue_(resolve_epilogue<T>(p.epilogue)) {}

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
    for (std::int64_t begin = 0; begin < rows; begin += chunk) {
      const std::int64_t end = std::min(rows, begin + chunk), n = end - begin;
      Scratch<T> g_buffer, dy_staged, x_staged, gu, dx_staged, z_staged;
      const T* z_rows = z_base ? z_base + begin * ldz : nullptr;
      if (half_z) {
        gather_rows<T>(*p_.intermediate, begin, end, z_staged.allocate(n * r_));
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
        gather_rows<T>(p_.out, begin, end, dy_staged.allocate(n * d_out));
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
      const T beta = begin == 0 ? T(0) : T(1);
      if (g_.bias) {
        gemm<T>(1, d_out, n, T(1), {ones.data(), false, n}, gc, dbias.data(), d_out, beta);
      }
      if (g_.U && u_width > 0) {
        gemm<T>(u_width, d_out, n, scale, transposed(MatrixOperand<T>{zc.data + u_first, false, ldz}), gc, du, ld_du, beta);
      }
      if (!g_.S && !g_.x) continue;
      // G·Upᵀ: all r columns for dx, else only the ones dS needs (stored from column 0).
      const std::int64_t gu_first = g_.x ? 0 : s_first, gu_width = g_.x ? r_ : s_width;
      T* gup = gu.allocate(n * gu_width);
      if (gu_width > 0) gemm<T>(n, gu_width, d_out, T(1), gc, transposed(rows_from<T>(up, gu_first)), gup, gu_width);
      if (g_.S) {
        MatrixOperand<T> xc;
        if (x_in_place) {
          xc = rows_from<T>(*x_in_place, begin);
        } else {
          gather_rows<T>(p_.x, begin, end, x_staged.allocate(n * d_in));
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
};

}  // namespace

void cpu_sketched_matmul(const SketchedMatmulProblem& p) {
  if (p.x.dtype() == DType::float64) {
    Executor<double>(p).run();
  } else {
    Executor<float>(p).run();
  }
}

void cpu_sketched_matmul_backward(const SketchedMatmulProblem& p, const SketchedMatmulGradients& g) {
  if (p.x.dtype() == DType::float64) {
    BackwardExecutor<double>(p, g).run();
  } else {
    BackwardExecutor<float>(p, g).run();
  }
}

}  // namespace sketchcore::detail
