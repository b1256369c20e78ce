#include "detail/blas.hpp"

#include <cblas.h>

#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cpu/gemm_skinny.hpp"
#include "detail/check.hpp"
#include "sketchcore/errors.hpp"
#include "sketchcore/execution.hpp"

// scipy-openblas32 prefixes every symbol with `scipy_`; other providers use none.
#ifndef SKETCHCORE_BLAS_PREFIX
#define SKETCHCORE_BLAS_PREFIX
#endif
#define SKETCHCORE_PASTE_IMPL(a, b) a##b
#define SKETCHCORE_PASTE(a, b) SKETCHCORE_PASTE_IMPL(a, b)
#define SKETCHCORE_BLAS_FN(name) SKETCHCORE_PASTE(SKETCHCORE_BLAS_PREFIX, name)

namespace sketchcore::detail {

namespace {

int blas_int(std::int64_t value, const char* what) {
  if (value > INT_MAX) {
    fail<shape_error>("sketched_matmul", what, "an extent ≤ 2147483647 (32-bit BLAS)", std::to_string(value));
  }
  return static_cast<int>(value);
}

CBLAS_TRANSPOSE trans(bool transposed) { return transposed ? CblasTrans : CblasNoTrans; }

// The one CBLAS call for both precisions; `cblas_gemm` is cblas_sgemm or cblas_dgemm.
template <class T, class CblasGemm>
void call_gemm(CblasGemm cblas_gemm, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
               const MatrixOperand<T>& a, const MatrixOperand<T>& b, T* c, std::int64_t ldc, T beta) {
  cblas_gemm(CblasRowMajor, trans(a.transposed), trans(b.transposed), blas_int(m, "rows"), blas_int(n, "columns"),
             blas_int(k, "inner dimension"), alpha, a.data, blas_int(a.ld, "leading dimension"), b.data,
             blas_int(b.ld, "leading dimension"), beta, c, blas_int(ldc, "leading dimension"));
}

template <class I, class T>
using FortranGemm = void (*)(const char*, const char*, const I*, const I*, const I*, const T*, const T*, const I*,
                             const T*, const I*, const T*, T*, const I*);

template <class I>
I index(std::int64_t value, const char* what) {
  if constexpr (sizeof(I) == sizeof(int)) {
    return blas_int(value, what);
  } else {
    return static_cast<I>(value);
  }
}

/// Row-major C = op(A)·op(B) through a column-major Fortran gemm: the same memory read
/// column-major is Cᵀ = op(B)ᵀ·op(A)ᵀ, so B comes first and the extents swap.
template <class I, class T>
void call_fortran(void* entry, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const MatrixOperand<T>& a,
                  const MatrixOperand<T>& b, T* c, std::int64_t ldc, T beta) {
  const char trans_b = b.transposed ? 'T' : 'N', trans_a = a.transposed ? 'T' : 'N';
  const I mi = index<I>(n, "columns"), ni = index<I>(m, "rows"), ki = index<I>(k, "inner dimension");
  const I ldb = index<I>(b.ld, "leading dimension"), lda = index<I>(a.ld, "leading dimension");
  const I ldci = index<I>(ldc, "leading dimension");
  reinterpret_cast<FortranGemm<I, T>>(entry)(&trans_b, &trans_a, &mi, &ni, &ki, &alpha, b.data, &ldb, a.data, &lda,
                                             &beta, c, &ldci);
}

/// The calling thread's provider entry for T, or nullptr for the built-in BLAS.
template <class T>
const CpuGemmProvider* provider_for(void*& entry) {
  const CpuGemmProvider* provider = current_execution().cpu_gemm;
  if (!provider) return nullptr;
  entry = std::is_same_v<T, float> ? provider->sgemm : provider->dgemm;
  return entry ? provider : nullptr;
}

template <class T, class CblasGemm>
void dispatch_gemm(CblasGemm builtin, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
                   const MatrixOperand<T>& a, const MatrixOperand<T>& b, T* c, std::int64_t ldc, T beta) {
  void* entry = nullptr;
  if (const CpuGemmProvider* provider = provider_for<T>(entry)) {
    if (provider->index_bits == 64) {
      call_fortran<std::int64_t, T>(entry, m, n, k, alpha, a, b, c, ldc, beta);
    } else {
      call_fortran<int, T>(entry, m, n, k, alpha, a, b, c, ldc, beta);
    }
    return;
  }
  call_gemm(builtin, m, n, k, alpha, a, b, c, ldc, beta);
}

}  // namespace

// Products of a few rows take the skinny kernels (cpu/gemm_skinny.hpp: B read once, no packing,
// no threads), whichever BLAS would have run them.
template <>
void gemm<float>(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const MatrixOperand<float>& a,
                 const MatrixOperand<float>& b, float* c, std::int64_t ldc, float beta) {
  if (gemm_skinny_applies(m, n, k)) return gemm_skinny(m, n, k, alpha, a, b, c, ldc, beta);
  dispatch_gemm(&SKETCHCORE_BLAS_FN(cblas_sgemm), m, n, k, alpha, a, b, c, ldc, beta);
}

template <>
void gemm<double>(std::int64_t m, std::int64_t n, std::int64_t k, double alpha, const MatrixOperand<double>& a,
                  const MatrixOperand<double>& b, double* c, std::int64_t ldc, double beta) {
  if (gemm_skinny_applies(m, n, k)) return gemm_skinny(m, n, k, alpha, a, b, c, ldc, beta);
  dispatch_gemm(&SKETCHCORE_BLAS_FN(cblas_dgemm), m, n, k, alpha, a, b, c, ldc, beta);
}

namespace {

/// C_i = A_i · B_i one GEMM at a time: without a native batched call (a generic CBLAS), and
/// while a CpuGemmProvider runs the thread's GEMMs (it has no batched entry point).
template <class T>
void gemm_batch_loop(std::int64_t m, std::int64_t n, std::int64_t k, const MatrixOperand<T>& a, std::int64_t stride_a,
                     const MatrixOperand<T>& b, std::int64_t stride_b, T* c, std::int64_t ldc, std::int64_t stride_c,
                     std::int64_t batch) {
  for (std::int64_t i = 0; i < batch; ++i) {
    gemm<T>(m, n, k, T(1), MatrixOperand<T>{a.data + i * stride_a, a.transposed, a.ld},
            MatrixOperand<T>{b.data + i * stride_b, b.transposed, b.ld}, c + i * stride_c, ldc);
  }
}

#if defined(SKETCHCORE_BLAS_HAS_BATCH_STRIDED)
template <class T, class CblasGemmBatch>
void call_gemm_batch(CblasGemmBatch fn, std::int64_t m, std::int64_t n, std::int64_t k, const MatrixOperand<T>& a,
                     std::int64_t stride_a, const MatrixOperand<T>& b, std::int64_t stride_b, T* c, std::int64_t ldc,
                     std::int64_t stride_c, std::int64_t batch) {
  void* entry = nullptr;
  if (provider_for<T>(entry)) {
    gemm_batch_loop(m, n, k, a, stride_a, b, stride_b, c, ldc, stride_c, batch);
    return;
  }
  fn(CblasRowMajor, trans(a.transposed), trans(b.transposed), blas_int(m, "rows"), blas_int(n, "columns"),
     blas_int(k, "inner dimension"), T(1), a.data, blas_int(a.ld, "leading dimension"), blas_int(stride_a, "stride"),
     b.data, blas_int(b.ld, "leading dimension"), blas_int(stride_b, "stride"), T(0), c,
     blas_int(ldc, "leading dimension"), blas_int(stride_c, "stride"), blas_int(batch, "batch"));
}
#endif

}  // namespace

template <>
void gemm_batch_strided<float>(std::int64_t m, std::int64_t n, std::int64_t k, const MatrixOperand<float>& a,
                               std::int64_t stride_a, const MatrixOperand<float>& b, std::int64_t stride_b, float* c,
                               std::int64_t ldc, std::int64_t stride_c, std::int64_t batch) {
#if defined(SKETCHCORE_BLAS_HAS_BATCH_STRIDED)
  call_gemm_batch(&SKETCHCORE_BLAS_FN(cblas_sgemm_batch_strided), m, n, k, a, stride_a, b, stride_b, c, ldc,
                  stride_c, batch);
#else
  gemm_batch_loop(m, n, k, a, stride_a, b, stride_b, c, ldc, stride_c, batch);
#endif
}

template <>
void gemm_batch_strided<double>(std::int64_t m, std::int64_t n, std::int64_t k, const MatrixOperand<double>& a,
                                std::int64_t stride_a, const MatrixOperand<double>& b, std::int64_t stride_b, double* c,
                                std::int64_t ldc, std::int64_t stride_c, std::int64_t batch) {
#if defined(SKETCHCORE_BLAS_HAS_BATCH_STRIDED)
  call_gemm_batch(&SKETCHCORE_BLAS_FN(cblas_dgemm_batch_strided), m, n, k, a, stride_a, b, stride_b, c, ldc,
                  stride_c, batch);
#else
  gemm_batch_loop(m, n, k, a, stride_a, b, stride_b, c, ldc, stride_c, batch);
#endif
}

void blas_set_num_threads(int num_threads) noexcept {
#if defined(SKETCHCORE_BLAS_HAS_SET_NUM_THREADS)
  SKETCHCORE_BLAS_FN(openblas_set_num_threads)(num_threads);
#else
  (void)num_threads;  // a generic CBLAS offers no portable thread control
#endif
}

const char* blas_provider() noexcept { return SKETCHCORE_BLAS_NAME; }

}  // namespace sketchcore::detail
