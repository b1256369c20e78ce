// CPU backend of the sketched GEMM: Y = epilogue(scale · (X · Sp) · Up), where
// Sp = [S_1 … S_T] (d_in × r) and Up = [U_1; …; U_T] (r × d_out), r = T·k.
//
// Rows are processed in chunks, one after the other: for each chunk the two GEMMs run on
// BLAS's threads, then sketchcore's workers apply the epilogue (bias, activation,
// dropout) to that chunk in one pass. An inner activation σ (bottleneck layers) is the first
// GEMM's epilogue: applied to the chunk of Z between the two GEMMs, while it is in cache. Chunks bound every temporary (Z = X·Sp and, when an
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
// arrays right after its epilogue, so no full-size float32 copy of them is ever made. Where
// the CPU has a native bfloat16 GEMM (cpu/gemm_bf16.hpp), X·Sp of a bfloat16 problem reads x
// and S as they are instead: Z comes out in float32 as before. Z·Up (Z, or σ(Z), a float32 sum)
// stays in BLAS, except where that GEMM runs on AMX tiles and T·k ≥ 64: there Z is split into
// bfloat16 pairs hi + lo (cpu/bf16_split.hpp, an error within float32 summation's bound) and
// multiplied by the bfloat16 Up with its rows repeated, on the tiles.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <type_traits>

#include "cpu/cpu_ops.hpp"
#include "cpu/bf16_split.hpp"
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

/// Budget of the Z = X·Sp chunk.
constexpr std::int64_t kIntermediateBytes = std::int64_t{4} << 20;
/// Budget of staged rows (x gathered or widened, out before its scatter or rounding): small
/// enough that a chunk's staged rows are still in L2 when its GEMM reads them or its copy-out
/// reads them back, but at least kMinStagedRows rows, below which re-packing Sp and Up for every
/// chunk's GEMMs costs more than the cache saves. Measured on a Zen 3 CPU with bfloat16 x, S, U
/// (issue 26), float32 call time / bfloat16 call time with 16 MiB → this budget: 2048 × 1024 →
/// 1024, T·k 128: 0.89 → 0.95–0.97; 1024 × 2048 → 2048: 0.88 → 0.91; 4096³, T·k 256 (512 rows,
/// 8 MiB): 1.02 → 1.00; 128 rows there read 0.86.
constexpr std::int64_t kStagingBytes = std::int64_t{2} << 20;
constexpr std::int64_t kMinStagedRows = 512;

template <class T>
class Executor {
 public:
  Executor(const SketchedMatmulProblem& p, HalfFactors half)
      : p_(p), r_(p.terms * p.rank), epilogue_(resolve_epilogue<T>(p.epilogue)) {
    if (!is_half(p.x.dtype())) x_in_place_ = operand_in_place<T>(p.x);
    // bfloat16 x and S: X·Sp in the native GEMM, x read in place (never widened).
    if (std::is_same_v<T, float> && half.S && p.x.dtype() == DType::bfloat16 && gemm_bf16_available()) {
      x16_ = operand_in_place<std::uint16_t>(p.x);
      if (x16_) s16_ = half.S;
    }
    // bfloat16 U in place: Z·Up on AMX tiles with Z split (see the header comment).
    if (std::is_same_v<T, float> && half.U && half.U->dtype() == DType::bfloat16 && p.x.dtype() == DType::bfloat16 &&
        r_ >= kMinSplitInner && gemm_bf16_amx_enabled()) {
      split_u_ = operand_in_place<std::uint16_t>(*half.U);
    }
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
      if (x16_) {
        const SketchedMatmulProblem bf16{p_.x, *s16_, p_.U, p_.out, p_.epilogue, p_.rows, p_.d_in, p_.terms, p_.rank, p_.d_out};
        sp16_ = first_factor<std::uint16_t>(bf16, chunk, s16_scratch_, /*allow_batched=*/false).sp;
      } else {
        factor_ = first_factor<T>(p_, chunk, s_scratch_);
      }
      if (split_u_) {
        repeat_rows_bf16(*split_u_, r_, p_.d_out, u_repeated_.allocate(2 * r_ * p_.d_out));
      } else {
        u_ = whole_operand<T>(p_.U, u_scratch_);  // (T, k, d_out) collapses to r × d_out
      }
    }
    for (std::int64_t begin = 0; begin < rows; begin += chunk) compute_rows(begin, std::min(rows, begin + chunk));
  }

 private:
  /// Rows per chunk: Z within kIntermediateBytes (but at least kMinChunkRows), staged x or
  /// out rows within kStagingBytes (but at least kMinStagedRows).
  std::int64_t chunk_rows() const {
    const auto per_row = [](std::int64_t elements) { return std::max<std::int64_t>(1, elements) * std::int64_t(sizeof(T)); };
    const auto staged_rows = [&](std::int64_t elements) { return std::max(kMinStagedRows, kStagingBytes / per_row(elements)); };
    std::int64_t chunk = std::max(kMinChunkRows, kIntermediateBytes / per_row(r_));
    if (!x_in_place_ && !x16_) chunk = std::min(chunk, staged_rows(p_.d_in));
    if (!out_in_place_) chunk = std::min(chunk, staged_rows(p_.d_out));
    return std::min(chunk, p_.rows);
  }

  /// Output rows [begin, end): both products, the epilogue, and the copy-out if `out`
  /// cannot be written in place.
  void compute_rows(std::int64_t begin, std::int64_t end) {
    const std::int64_t n = end - begin, d_out = p_.d_out;
    Scratch<T> y_scratch, z;
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
      if (!zp) zp = z.allocate(n * r_);
      first_product(begin, end, zp, ldz);
      if (half_intermediate_) scatter_rows<T>(zp, ldz, *p_.intermediate, begin, end);  // Z rounded once
      Scratch<T> activated;
      const MatrixOperand<T> a = inner_activation(zp, ldz, n, activated);
      second_product(n, a, y, ldy);
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

  /// The second product's left operand for a chunk of Z: Z itself, or σ(Z) for an inner
  /// activation — computed in place while the chunk is still in cache, except where Z is the
  /// caller's intermediate (saved pre-activation for the backward), then into `room`.
  MatrixOperand<T> inner_activation(T* zp, std::int64_t ldz, std::int64_t n, Scratch<T>& room) const {
    const Activation sigma = p_.epilogue.inner_activation;
    if (sigma == Activation::none) return {zp, false, ldz};
    const bool z_is_saved = p_.intermediate && !half_intermediate_;
    T* dst = z_is_saved ? room.allocate(n * r_) : zp;
    const std::int64_t ld = z_is_saved ? r_ : ldz;
    inner_activation_forward<T>(sigma, zp, ldz, dst, ld, n, r_);
    return {dst, false, ld};
  }

  /// y (n rows, leading dimension ldy) = scale · a · Up: BLAS, or the bfloat16 GEMM on a split
  /// into hi + lo pairs against Up with its rows repeated.
  void second_product(std::int64_t n, const MatrixOperand<T>& a, T* y, std::int64_t ldy) {
    if constexpr (std::is_same_v<T, float>) {
      if (split_u_) {
        Scratch<std::uint32_t> pairs(n * r_);
        split_bf16_pairs(a.data, a.ld, n, r_, pairs.data(), r_);
        const Bf16Operand split{reinterpret_cast<const std::uint16_t*>(pairs.data()), false, 2 * r_};
        return gemm_bf16(n, p_.d_out, 2 * r_, static_cast<float>(p_.epilogue.scale), split,
                         Bf16Operand{u_repeated_.data(), false, p_.d_out}, y, ldy);
      }
    }
    gemm<T>(n, p_.d_out, r_, static_cast<T>(p_.epilogue.scale), a, u_, y, ldy);
  }

  /// Z (rows [begin, end), leading dimension ldz) = X·Sp: the native bfloat16 GEMM on x in
  /// place, else BLAS on x in place or on its rows gathered (and widened) into a buffer.
  void first_product(std::int64_t begin, std::int64_t end, T* zp, std::int64_t ldz) {
    const std::int64_t n = end - begin;
    if constexpr (std::is_same_v<T, float>) {
      if (x16_) return gemm_bf16(n, r_, p_.d_in, 1.0f, rows_from<std::uint16_t>(*x16_, begin), sp16_, zp, ldz);
    }
    Scratch<T> x_scratch;
    MatrixOperand<T> x_rows;
    if (x_in_place_) {
      x_rows = rows_from<T>(*x_in_place_, begin);
    } else {
      T* staged = x_scratch.allocate(n * p_.d_in);
      gather_rows_parallel<T>(p_.x, begin, end, staged);
      x_rows = {staged, false, std::max<std::int64_t>(p_.d_in, 1)};
    }
    if (factor_.batched) {
      gemm_batch_strided<T>(n, p_.rank, p_.d_in, x_rows, 0, factor_.s0, factor_.term_stride, zp, ldz, p_.rank,
                            p_.terms);
    } else {
      gemm<T>(n, r_, p_.d_in, T(1), x_rows, factor_.sp, zp, ldz);
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
  std::optional<Bf16Operand> x16_;  // bfloat16 x in place, for the native X·Sp
  const TensorView* s16_ = nullptr;  // its bfloat16 S
  Bf16Operand sp16_{nullptr, false, 1};
  Scratch<std::uint16_t> s16_scratch_;
  std::optional<Bf16Operand> split_u_;  // bfloat16 Up (r × d_out) of a split Z·Up
  Scratch<std::uint16_t> u_repeated_;     // its Up with every row repeated (2r × d_out)
};

}  // namespace

void cpu_sketched_matmul(const SketchedMatmulProblem& p, HalfFactors half) {
  if (p.x.dtype() == DType::float64) {
    Executor<double>(p, half).run();
  } else {
    Executor<float>(p, half).run();
  }
}

}  // namespace sketchcore::detail
