// A bfloat16 GEMM with float32 accumulation, for the products of a bfloat16 problem whose
// operands are already bfloat16 values (cpu/sketched_matmul_cpu.cpp and
// cpu/sketched_matmul_backward_cpu.cpp): each product of two bfloat16 values is exact in float32
// and the sums are float32 sums, so the result is what sgemm gives on the widened operands, up to
// summation order, without widening them. Two kernels: AMX-BF16 tiles (TDPBF16PS,
// cpu/gemm_bf16_amx.cpp; Intel Sapphire Rapids on, where Linux grants the tile state) and, on
// other CPUs with AVX512_BF16 (Intel Cooper Lake, AMD Zen 4 on), VDPBF16PS (cpu/gemm_bf16.cpp);
// elsewhere the callers widen and use sgemm. Environment (read once per process):
// SKETCHCORE_BF16_GEMM=0 turns both off (the widening path), SKETCHCORE_BF16_AMX=0 keeps the
// VDPBF16PS kernel on an AMX CPU, to compare the two.
#pragma once

#include <cstdint>

#include "detail/layout.hpp"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(SKETCHCORE_NO_CLONES)
#define SKETCHCORE_GEMM_BF16 1
#else
#define SKETCHCORE_GEMM_BF16 0
#endif

namespace sketchcore::detail {

/// A bfloat16 matrix operand (the bits, as std::uint16_t).
using Bf16Operand = MatrixOperand<std::uint16_t>;

/// True when gemm_bf16 may be called: compiled in, the CPU has AVX512_BF16 and the environment
/// variable SKETCHCORE_BF16_GEMM is not "0" (both read once per process; "0" keeps the widening
/// path, to compare the two).
bool gemm_bf16_available() noexcept;

/// C (m × n, row-major, leading dimension ldc) = alpha · A (m × k) · B (k × n) + beta · C, with
/// bfloat16 A and B. Products are exact and accumulate in float32; like every VDPBF16PS or
/// TDPBF16PS GEMM, subnormal inputs count as zero and subnormal products and sums are flushed to
/// zero. alpha scales each slab of 512 inner indices as it is added to C (one more rounding per
/// slab where alpha is not a power of two). beta = 0: C is not read. Runs on sketchcore's workers
/// (parallel_for), on the AMX kernel where gemm_bf16_amx_enabled(), else on the VDPBF16PS one.
/// Requires gemm_bf16_available().
void gemm_bf16(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const Bf16Operand& a,
               const Bf16Operand& b, float* c, std::int64_t ldc, float beta = 0.0f);

/// True when gemm_bf16 runs the AMX kernel: gemm_bf16_available(), the CPU has AMX-BF16 and the
/// tile state was granted (cpu/amx_support.hpp), and SKETCHCORE_BF16_AMX is not "0" (read once
/// per process).
bool gemm_bf16_amx_enabled() noexcept;

/// gemm_bf16 on AMX tiles (TDPBF16PS), with the same contract; m, n, k > 0. Requires
/// amx_bf16_supported() (cpu/amx_support.hpp), whatever the environment says (the white-box
/// tests compare the two kernels in one process).
void gemm_bf16_amx(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const Bf16Operand& a,
                   const Bf16Operand& b, float* c, std::int64_t ldc, float beta);

/// gemm_bf16 on VDPBF16PS (8 × 32 register kernel), with the same contract; m, n, k > 0.
/// Requires gemm_bf16_available().
void gemm_bf16_vdpbf16ps(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const Bf16Operand& a,
                         const Bf16Operand& b, float* c, std::int64_t ldc, float beta);

/// sums[j] = Σ_i src[i·ld + j] (or sums[j] += that when `accumulate`) for j < cols, over i < rows,
/// of bfloat16 values widened exactly, summed in float32: the bias gradient of a bfloat16
/// backward without a widened copy. Columns are split over the workers. Requires
/// gemm_bf16_available().
void bfloat16_column_sums(const std::uint16_t* src, std::int64_t ld, std::int64_t rows, std::int64_t cols, float* sums,
                          bool accumulate);

}  // namespace sketchcore::detail
