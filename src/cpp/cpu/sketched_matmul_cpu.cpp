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
// Why BLAS threads rather than one BLAS call per thread on row panels (DESIGN allows
// either): measured on 2 cores at 4096 × 4096 → 4096, T·k = 256, per-thread panels were
// 8–15% slower, because every panel GEMM packs all of Sp and Up again; the epilogue pass
// that panels would keep in L2 costs less than that.
//
// With few rows and T > 1 the first product is one batched-strided BLAS call over the
// terms (OpenBLAS), so that S need not be packed into Sp on every call.
#include <algorithm>
#include <cstring>
#include <optional>

#include "detail/backend.hpp"
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
/// Smaller chunks than this lose BLAS efficiency (each call packs Sp and Up again).
constexpr std::int64_t kMinChunkRows = 1024;

/// How the product X·Sp is formed.
template <class T>
struct FirstFactor {
  BlasMatrix<T> sp{nullptr, false, 1};   // Sp when it is a matrix (in place or packed)
  bool batched = false;                  // else: one batched call over S_t (d_in × k each)
  BlasMatrix<T> s0{nullptr, false, 1};   // S_0 as a matrix, for the batched call
  std::int64_t term_stride = 0;
};

/// True when the (T, k) columns of S collapse into one stride, and then that stride.
std::optional<std::int64_t> sketch_column_stride(const SketchedMatmulProblem& p) {
  const TensorView& S = p.S;
  if (S.ndim() == 2 || p.terms <= 1) return S.stride(-1);
  if (p.rank == 1) return S.stride(0);
  if (S.stride(0) == p.rank * S.stride(-1)) return S.stride(-1);
  return std::nullopt;
}

template <class T>
FirstFactor<T> first_factor(const SketchedMatmulProblem& p, std::int64_t chunk_rows, Scratch<T>& scratch) {
  const TensorView& S = p.S;
  const std::int64_t r = p.terms * p.rank;
  const auto* base = static_cast<const T*>(S.data());
  FirstFactor<T> f;
  if (const auto cs = sketch_column_stride(p)) {
    if (auto op = blas_operand(base, p.d_in, r, S.stride(-2), *cs)) {
      f.sp = *op;
      return f;
    }
  }
  // Packing S costs d_in·r per call; the batched call instead re-reads each chunk of X
  // once per term. With few rows ((T−1)·rows ≤ 2r) re-reading X is the cheaper of the two,
  // unless S is so small (< 64k elements) that packing it is cheaper than the batched
  // call's own overhead.
  if (blas_has_batched() && p.d_in * r >= (std::int64_t{1} << 16) && (p.terms - 1) * chunk_rows <= 2 * r) {
    if (auto op = blas_operand(base, p.d_in, p.rank, S.stride(-2), S.stride(-1))) {
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
BlasMatrix<T> whole_operand(const TensorView& v, Scratch<T>& scratch) {
  const RowMatrix m = as_row_matrix(v);
  if (auto op = blas_operand<T>(v, m)) return *op;
  pack_rows<T>(v, scratch.allocate(m.rows * m.cols));
  return {scratch.data(), false, std::max<std::int64_t>(m.cols, 1)};
}

/// Rows [begin, ...) of an in-place operand.
template <class T>
BlasMatrix<T> row_offset(const BlasMatrix<T>& m, std::int64_t begin) {
  return {m.data + (m.transposed ? begin : begin * m.ld), m.transposed, m.ld};
}

template <class T>
class Executor {
 public:
  explicit Executor(const SketchedMatmulProblem& p)
      : p_(p), r_(p.terms * p.rank), epilogue_(resolve_epilogue<T>(p.epilogue)) {
    const RowMatrix xm = as_row_matrix(p.x), om = as_row_matrix(p.out);
    x_in_place_ = blas_operand<T>(p.x, xm);
    if (auto o = blas_operand<T>(p.out, om); o && !o->transposed) {
      out_in_place_ = BlasMatrix<T>{o->data, false, o->ld};
    }
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
    if (r_ == 0 || p_.d_in == 0) {
      for (std::int64_t i = 0; i < n; ++i) std::fill(y + i * ldy, y + i * ldy + d_out, T(0));  // empty sum
    } else {
      BlasMatrix<T> x_rows;
      if (x_in_place_) {
        x_rows = row_offset(*x_in_place_, begin);
      } else {
        T* staged = x_scratch.allocate(n * p_.d_in);
        const std::int64_t grain = std::max<std::int64_t>(1, (std::int64_t{1} << 15) / std::max<std::int64_t>(p_.d_in, 1));
        parallel_for(n, grain, [&](std::int64_t b, std::int64_t e) {
          gather_rows<T>(p_.x, begin + b, begin + e, staged + b * p_.d_in);
        });
        x_rows = {staged, false, std::max<std::int64_t>(p_.d_in, 1)};
      }
      T* zp = z.allocate(n * r_);
      if (factor_.batched) {
        gemm_batch_strided<T>(n, p_.rank, p_.d_in, x_rows, 0, factor_.s0, factor_.term_stride, zp, r_, p_.rank,
                              p_.terms);
      } else {
        gemm<T>(n, r_, p_.d_in, T(1), x_rows, factor_.sp, zp, r_);
      }
      gemm<T>(n, d_out, r_, static_cast<T>(p_.epilogue.scale), BlasMatrix<T>{zp, false, r_}, u_, y, ldy);
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
  std::optional<BlasMatrix<T>> x_in_place_, out_in_place_;
  FirstFactor<T> factor_;
  BlasMatrix<T> u_{nullptr, false, 1};
  Scratch<T> s_scratch_, u_scratch_;
};

class CpuBackend final : public Backend {
 public:
  void sketched_matmul(const SketchedMatmulProblem& p) const override {
    if (p.x.dtype() == DType::float64) {
      Executor<double>(p).run();
    } else {
      Executor<float>(p).run();
    }
  }
};

}  // namespace

const Backend& cpu_backend() {
  static const CpuBackend backend;
  return backend;
}

}  // namespace sketchcore::detail
