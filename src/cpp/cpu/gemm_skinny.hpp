// GEMMs with very few rows (m ≤ kSkinnyRows): a token being decoded, a tiny batch, the bias
// gradient's row of ones. They are matrix-vector products in all but name, bound by reading B
// once from memory, and a BLAS sgemm spends most of their time elsewhere: it packs B into
// panels (one more read and a write of B) and may wake its threads. Measured on a Zen 4 VM
// (float32, one row, weights cold as in a model's decode step): LowRankLinear 1024 → 2816 at
// rank 176 took 215–250 µs per call through MKL's sgemm, where the weights' bytes at the
// DRAM rate the dense layer reached would take about 165 µs (bench/results/cpu-llm-*).
//
// These kernels read each element of B exactly once, in memory order, on the calling thread:
// - B row-major (k × n): C's m rows accumulate alpha·A(i, l)·B(l, :) row after row of B (C's
//   rows stay in L1/L2 while B streams through);
// - B transposed (stored n × k): each C(i, j) is a dot product of A's row i with B's stored row
//   j, accumulated in 16 independent lanes (vectorised without reassociating a sum).
#pragma once

#include <cstdint>

#include "detail/layout.hpp"

namespace sketchcore::detail {

/// The most rows a GEMM may have to take the skinny kernels.
constexpr std::int64_t kSkinnyRows = 4;

/// Whether gemm_skinny computes this product (m ≤ kSkinnyRows, every extent ≥ 1).
inline bool gemm_skinny_applies(std::int64_t m, std::int64_t n, std::int64_t k) noexcept {
  return m >= 1 && m <= kSkinnyRows && n >= 1 && k >= 1;
}

/// C (m × n, row-major, leading dimension ldc) = alpha · A (m × k) · B (k × n) + beta · C, for
/// gemm_skinny_applies(m, n, k); any layout of A and B the operand type describes. beta = 0:
/// C is not read. Runs on the calling thread.
template <class T>
void gemm_skinny(std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const MatrixOperand<T>& a,
                 const MatrixOperand<T>& b, T* c, std::int64_t ldc, T beta);

}  // namespace sketchcore::detail
