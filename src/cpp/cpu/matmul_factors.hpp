// The factors of the CPU sketched GEMM as BLAS operands, shared by its forward
// (cpu/sketched_matmul_cpu.cpp) and backward (cpu/sketched_matmul_backward_cpu.cpp):
// Sp = [S_1 … S_T] (d_in × r) read in place or packed, Up (r × d_out) likewise. T is the element
// type: float or double, or std::uint16_t for the bfloat16 factors of a native bfloat16 GEMM
// (cpu/gemm_bf16.hpp).
#pragma once

#include <algorithm>
#include <cstdint>

#include "detail/backend.hpp"
#include "detail/layout.hpp"
#include "detail/parallel.hpp"
#include "detail/scratch.hpp"
#include "detail/strided.hpp"

namespace sketchcore::detail {

/// Smaller chunks of rows than this lose BLAS efficiency (each call packs Sp and Up again).
constexpr std::int64_t kMinChunkRows = 1024;

/// How the product X·Sp is formed.
template <class T>
struct FirstFactor {
  MatrixOperand<T> sp{nullptr, false, 1};  // Sp when it is a matrix (in place or packed)
  bool batched = false;                     // else: one batched call over S_t (d_in × k each)
  MatrixOperand<T> s0{nullptr, false, 1};  // S_0 as a matrix, for the batched call
  std::int64_t term_stride = 0;
};

/// `allow_batched` = false guarantees a matrix Sp (the backward multiplies by Spᵀ).
template <class T>
inline FirstFactor<T> first_factor(const SketchedMatmulProblem& p, std::int64_t chunk_rows, Scratch<T>& scratch,
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
  pack_terms<T>(S, p.terms, p.rank, dst);
  f.sp = {dst, false, std::max<std::int64_t>(r, 1)};
  return f;
}

/// A matrix operand whose rows can be addressed: in place when possible, else packed.
template <class T>
inline MatrixOperand<T> whole_operand(const TensorView& v, Scratch<T>& scratch) {
  const RowMatrix m = as_row_matrix(v);
  if (auto op = operand_in_place<T>(v)) return *op;
  pack_rows<T>(v, scratch.allocate(m.rows * m.cols));
  return {scratch.data(), false, std::max<std::int64_t>(m.cols, 1)};
}

}  // namespace sketchcore::detail
