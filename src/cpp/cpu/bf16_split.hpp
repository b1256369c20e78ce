// A float32 operand as the sum of two bfloat16 values, so that the AMX bfloat16 GEMM can take a
// float32 left operand (a bfloat16 problem's Z or σ(Z), a float32 sum) at near-float32 accuracy:
// z = hi + lo + e with hi = bfloat16(z), lo = bfloat16(z − hi) (z − hi is exact in float32) and
// |e| ≤ 2⁻⁹·|z − hi| ≤ 2⁻¹⁸·|z|. Then A·B = [hi lo]·[B; B] up to e·B: stored as pairs (hi, lo)
// against B with every row repeated, one GEMM over 2k inner indices. Over k ≥ 64 inner indices
// e's share, 2⁻¹⁸·Σ|a||b|, is within float32 summation's own bound, (k + 2)·2⁻²⁴·Σ|a||b|, so the
// product stays "the float32 computation up to summation order" (cpu/gemm_bf16.hpp's contract).
#pragma once

#include <cstdint>

#include "cpu/gemm_bf16.hpp"

namespace sketchcore::detail {

/// The least inner extent at which a split product's error e·B is within float32 summation's
/// bound (see above).
constexpr std::int64_t kMinSplitInner = 64;

/// dst[i·ld_dst + q] = (hi, lo) of src[i·ld + q] (hi in the low 16 bits: pair element 2q, lo in
/// the high: 2q + 1) for i < rows, q < cols; rows split over the workers. Requires
/// gemm_bf16_available() (AVX512_BF16 conversions).
void split_bf16_pairs(const float* src, std::int64_t ld, std::int64_t rows, std::int64_t cols, std::uint32_t* dst,
                      std::int64_t ld_dst);

/// dst (2·rows × cols, row-major) = b (rows × cols) with every row repeated: dst rows 2q and
/// 2q + 1 both b's row q, the right operand of a split product.
void repeat_rows_bf16(const Bf16Operand& b, std::int64_t rows, std::int64_t cols, std::uint16_t* dst);

}  // namespace sketchcore::detail
