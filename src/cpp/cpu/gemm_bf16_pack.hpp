// The packing of bfloat16 operands into 32-bit pairs shared by the two bfloat16 GEMM kernels
// (cpu/gemm_bf16.cpp, VDPBF16PS, and cpu/gemm_bf16_amx.cpp, TDPBF16PS): both multiply pair q of
// a row of A, (A[i][2q], A[i][2q+1]), by the pair (B[2q][j], B[2q+1][j]) held in lane j of a
// packed B row, so one layout serves both.
#pragma once

#include <cstdint>

namespace sketchcore::detail {

/// Packs `count` (≤ width) rows or columns of an operand, inner indices [k0, k0 + kb), into
/// dst[q][j] = (element(first + j, k0 + 2q), element(first + j, k0 + 2q + 1)) for q <
/// ⌈kb/2⌉, the pair's high half zero past kb and whole pairs zero for j ≥ count. element(i, kk)
/// is base[i·ld + kk] when `inner_contiguous`, else base[kk·ld + i].
void pack_bf16_pairs(const std::uint16_t* base, std::int64_t ld, bool inner_contiguous, std::int64_t first,
                     std::int64_t count, std::int64_t k0, std::int64_t kb, int width, std::uint32_t* dst);

}  // namespace sketchcore::detail
