// The CPU backend's only door to CBLAS. Nothing else includes cblas.h, so the provider
// (scipy-openblas32 with its `scipy_` symbol prefix, a system OpenBLAS, any CBLAS) is a
// detail of cpu/blas.cpp.
#pragma once

#include <cstdint>

namespace sketchcore::detail {

/// A read-only matrix operand as CBLAS sees it in row-major order. `transposed` means the
/// memory holds the matrix column by column (its transpose is row-major with leading
/// dimension `ld`).
template <class T>
struct BlasMatrix {
  const T* data;
  bool transposed;
  std::int64_t ld;
};

/// C (m×n, row-major, leading dimension ldc) = alpha · A (m×k) · B (k×n) + beta · C.
/// Requires m, n, k ≥ 1; throws shape_error if an extent exceeds the 32-bit BLAS range.
template <class T>
void gemm(std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const BlasMatrix<T>& a,
          const BlasMatrix<T>& b, T* c, std::int64_t ldc, T beta = T(0));

/// C_i = A_i · B_i for i < batch, where X_i = X + i · stride_X (elements): one BLAS call
/// (cblas_?gemm_batch_strided). Only with blas_has_batched(); throws otherwise.
template <class T>
void gemm_batch_strided(std::int64_t m, std::int64_t n, std::int64_t k, const BlasMatrix<T>& a,
                        std::int64_t stride_a, const BlasMatrix<T>& b, std::int64_t stride_b, T* c,
                        std::int64_t ldc, std::int64_t stride_c, std::int64_t batch);

/// Whether this build's CBLAS exports cblas_?gemm_batch_strided (probed by CMake).
bool blas_has_batched() noexcept;

/// Sets the BLAS library's thread count where the provider exports openblas_set_num_threads.
void blas_set_num_threads(int num_threads) noexcept;

/// Name of the CBLAS provider this library was built against.
const char* blas_provider() noexcept;

}  // namespace sketchcore::detail
