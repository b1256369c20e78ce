// The skinny GEMM kernels of cpu/gemm_skinny.hpp, compiled for AVX-512, AVX2 and baseline
// x86-64 (target clones); the inner loops are plain loops the vectoriser turns into vector
// code, over independent lanes so that no sum is reassociated.
#include "cpu/gemm_skinny.hpp"

#include <algorithm>
#include <cstdint>

#include "cpu/target_clones.hpp"
#include "detail/scratch.hpp"

namespace sketchcore::detail {

namespace {

constexpr int kLanes = 16;  // independent partial sums of a dot product (one AVX-512 vector of float)

template <class T>
T element(const MatrixOperand<T>& a, std::int64_t i, std::int64_t l) {
  return a.transposed ? a.data[l * a.ld + i] : a.data[i * a.ld + l];
}

/// C's rows scaled by beta (zeroed for beta = 0, never read then).
template <class T>
void scale_rows(std::int64_t m, std::int64_t n, T* c, std::int64_t ldc, T beta) {
  for (std::int64_t i = 0; i < m; ++i) {
    T* row = c + i * ldc;
    if (beta == T(0)) {
      std::fill(row, row + n, T(0));
    } else if (beta != T(1)) {
      for (std::int64_t j = 0; j < n; ++j) row[j] *= beta;
    }
  }
}

/// C(i, :) += s · B(l, :) for one row l of a row-major B: the loop the vectoriser keeps tight.
template <class T>
inline __attribute__((always_inline)) void axpy_row(std::int64_t n, T s, const T* __restrict b, T* __restrict c) {
  for (std::int64_t j = 0; j < n; ++j) c[j] += s * b[j];
}

/// Σ_l x[l]·y[l] over `k` contiguous elements, in kLanes independent partial sums added last.
template <class T>
inline __attribute__((always_inline)) T dot(std::int64_t k, const T* __restrict x, const T* __restrict y) {
  T lanes[kLanes] = {};
  std::int64_t l = 0;
  for (; l + kLanes <= k; l += kLanes) {
    for (int q = 0; q < kLanes; ++q) lanes[q] += x[l + q] * y[l + q];
  }
  for (int q = 0; l < k; ++l, ++q) lanes[q] += x[l] * y[l];
  T sum = T(0);
  for (int q = 0; q < kLanes; ++q) sum += lanes[q];
  return sum;
}

/// B row-major: C += alpha · A · B, streaming B's rows once.
template <class T>
inline __attribute__((always_inline)) void rows_of_b(std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
                                                     const MatrixOperand<T>& a, const MatrixOperand<T>& b, T* c,
                                                     std::int64_t ldc) {
  for (std::int64_t l = 0; l < k; ++l) {
    const T* row = b.data + l * b.ld;
    for (std::int64_t i = 0; i < m; ++i) axpy_row(n, alpha * element(a, i, l), row, c + i * ldc);
  }
}

/// B transposed (stored n × k): C(i, j) += alpha · A(i, :)·Bᵀ(j, :), A's rows contiguous at
/// `a_rows`, `lda` apart.
template <class T>
inline __attribute__((always_inline)) void columns_of_b(std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
                                                        const T* a_rows, std::int64_t lda, const MatrixOperand<T>& b,
                                                        T* c, std::int64_t ldc) {
  for (std::int64_t j = 0; j < n; ++j) {
    const T* column = b.data + j * b.ld;
    for (std::int64_t i = 0; i < m; ++i) c[i * ldc + j] += alpha * dot(k, a_rows + i * lda, column);
  }
}

#define SKETCHCORE_SKINNY_KERNELS(T)                                                                              \
  SKETCHCORE_CLONES void rows_of_b_cloned(std::int64_t m, std::int64_t n, std::int64_t k, T alpha,                 \
                                          const MatrixOperand<T>& a, const MatrixOperand<T>& b, T* c,               \
                                          std::int64_t ldc) {                                                       \
    rows_of_b<T>(m, n, k, alpha, a, b, c, ldc);                                                                     \
  }                                                                                                                 \
  SKETCHCORE_CLONES void columns_of_b_cloned(std::int64_t m, std::int64_t n, std::int64_t k, T alpha,              \
                                             const T* a_rows, std::int64_t lda, const MatrixOperand<T>& b, T* c,    \
                                             std::int64_t ldc) {                                                    \
    columns_of_b<T>(m, n, k, alpha, a_rows, lda, b, c, ldc);                                                       \
  }
SKETCHCORE_SKINNY_KERNELS(float)
SKETCHCORE_SKINNY_KERNELS(double)
#undef SKETCHCORE_SKINNY_KERNELS

}  // namespace

template <class T>
void gemm_skinny(std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const MatrixOperand<T>& a,
                 const MatrixOperand<T>& b, T* c, std::int64_t ldc, T beta) {
  scale_rows(m, n, c, ldc, beta);
  if (!b.transposed) {
    rows_of_b_cloned(m, n, k, alpha, a, b, c, ldc);
    return;
  }
  if (!a.transposed) {  // A's rows are contiguous already
    columns_of_b_cloned(m, n, k, alpha, a.data, a.ld, b, c, ldc);
    return;
  }
  // A stored transposed (k × m): its m ≤ kSkinnyRows rows gathered once (m·k elements).
  Scratch<T> rows(m * k);
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t l = 0; l < k; ++l) rows.data()[i * k + l] = a.data[l * a.ld + i];
  }
  columns_of_b_cloned(m, n, k, alpha, rows.data(), k, b, c, ldc);
}

template void gemm_skinny<float>(std::int64_t, std::int64_t, std::int64_t, float, const MatrixOperand<float>&,
                                 const MatrixOperand<float>&, float*, std::int64_t, float);
template void gemm_skinny<double>(std::int64_t, std::int64_t, std::int64_t, double, const MatrixOperand<double>&,
                                  const MatrixOperand<double>&, double*, std::int64_t, double);

}  // namespace sketchcore::detail
