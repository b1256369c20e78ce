// Row-major GEMMs on cuBLASLt with its bias/activation epilogues, algorithm heuristics
// cached per shape, workspace from the stream-ordered pool.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>

#include "detail/layout.hpp"
#include "sketchcore/epilogue.hpp"
#include "sketchcore/tensor.hpp"

namespace sketchcore::cuda {

/// A read-only matrix operand in row-major terms: the core's one operand type
/// (detail/layout.hpp), type-erased.
using DeviceMatrix = detail::MatrixOperand<void>;
using detail::cols_from;
using detail::rows_from;
using detail::transposed;

/// `view` (a matrix of its rows: leading dimensions collapse into one) as an operand in
/// place, if its layout allows (unit stride along rows or columns); else nullopt.
inline std::optional<DeviceMatrix> in_place(const TensorView& view) { return detail::operand_in_place<void>(view); }

/// The part of an epilogue cuBLASLt applies inside the GEMM.
struct LtEpilogue {
  const void* bias = nullptr;                ///< contiguous (d_out,) of the GEMM's dtype, or null
  Activation activation = Activation::none;  ///< none, relu or gelu_tanh
};

/// Whether cuBLASLt can apply `activation` (relu, and gelu_tanh, its GELU epilogue being
/// the tanh form) for `dtype` (not float64, whose epilogues are not offered).
bool lt_supports(DType dtype, Activation activation) noexcept;

/// C (m×n, row-major, leading dimension ldc) = alpha·A (m×k)·B (k×n) + beta·C, then the
/// epilogue, on `stream` of device `device`. float16/bfloat16 accumulate in float32;
/// float32 uses TF32 only when `allow_tf32`. Requires m, n, k ≥ 1.
/// @throws cuda_error when cuBLASLt fails or offers no algorithm
void lt_gemm(int device, DType dtype, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
             const DeviceMatrix& a, const DeviceMatrix& b, double beta, void* c, std::int64_t ldc,
             const LtEpilogue& epilogue, bool allow_tf32, cudaStream_t stream);

/// The int8 product of the int8 sketched GEMM, exact in int32: d (n × m, row-major, leading
/// dimension m) with d(r, j) = Σ_c b(r, c) · a(j, c) for c < k, where `a` holds m rows of k int8
/// values (a factor's columns, detail/quantized_storage.hpp) and `b` n rows of k int8 values (quantized
/// activations), both with leading dimension k. In cuBLASLt's column-major terms the "TN" int8
/// GEMM its tensor-core kernels run, D = Aᵀ·B with CUBLAS_COMPUTE_32I; m and k must be multiples
/// of 16 (leading dimensions too), the pointers 16-byte aligned. Plans are cached per shape.
/// UNVERIFIED: never run on a GPU (gated path cuda_int8_factors).
/// @throws cuda_error when cuBLASLt fails or offers no algorithm
void lt_gemm_int8(int device, std::int64_t m, std::int64_t n, std::int64_t k, const std::int8_t* a,
                  const std::int8_t* b, std::int32_t* d, cudaStream_t stream);

/// The fp8 product of the fp8 sketched GEMM: d (n × m, row-major, leading dimension m, float32)
/// with d(r, j) = Σ_c b(r, c) · a(j, c) for c < k, where `a` holds m rows of k e4m3 codes (a
/// factor's columns, detail/quantized_storage.hpp) and `b` n rows of k e4m3 codes (quantized
/// activations), both with leading dimension k: cuBLASLt's "TN" fp8 GEMM (CUDA_R_8F_E4M3 A and B,
/// CUBLAS_COMPUTE_32F, float32 C and D, unit per-tensor scales), which cuBLASLt runs on compute
/// capability 8.9 and newer only; m and k (the leading dimensions too) must be multiples of 16, pointers 16-byte
/// aligned. Plans are cached per shape.
/// UNVERIFIED: never run on a GPU (gated path cuda_fp8_factors).
/// @throws cuda_error when cuBLASLt fails or offers no algorithm
void lt_gemm_fp8(int device, std::int64_t m, std::int64_t n, std::int64_t k, const std::uint8_t* a,
                 const std::uint8_t* b, float* d, cudaStream_t stream);

}  // namespace sketchcore::cuda
