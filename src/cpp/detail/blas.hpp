// The CPU backend's only door to CBLAS. Nothing else includes cblas.h, so the provider
// (scipy-openblas32 with its `scipy_` symbol prefix, a system OpenBLAS, any CBLAS) is a
// detail of cpu/blas.cpp.
#pragma once

#include <cstdint>

#include "detail/layout.hpp"

namespace sketchcore::detail {

/// CBLAS takes the one operand type of the layout analysis.
template <class T>
using MatrixOperand = MatrixOperand<T>;

/// C (m×n, row-major, leading dimension ldc) = alpha · A (m×k) · B (k×n) + beta · C.
/// Requires m, n, k ≥ 1; throws shape_error if an extent exceeds the 32-bit BLAS range.
template <class T>
void gemm(std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const MatrixOperand<T>& a,
          const MatrixOperand<T>& b, T* c, std::int64_t ldc, T beta = T(0));

/// C_i = A_i · B_i for i < batch, where X_i = X + i · stride_X (elements): one BLAS call
/// (cblas_?gemm_batch_strided) where the build's CBLAS has it and no CpuGemmProvider is set
/// for the calling thread, else one GEMM per matrix.
template <class T>
void gemm_batch_strided(std::int64_t m, std::int64_t n, std::int64_t k, const MatrixOperand<T>& a,
                        std::int64_t stride_a, const MatrixOperand<T>& b, std::int64_t stride_b, T* c,
                        std::int64_t ldc, std::int64_t stride_c, std::int64_t batch);

/// Sets the BLAS library's thread count where the provider exports openblas_set_num_threads.
void blas_set_num_threads(int num_threads) noexcept;

/// Name of the CBLAS provider this library was built against.
const char* blas_provider() noexcept;

}  // namespace sketchcore::detail
