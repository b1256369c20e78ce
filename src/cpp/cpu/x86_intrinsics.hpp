// <immintrin.h> for the files whose kernels are compiled for AVX-512 or AVX2 through target
// attributes (cpu/activations_avx512.cpp, cpu/activations_avx2.cpp, cpu/gemm_bf16.cpp). GCC 12's avx512fintrin.h leaves the
// pass-through operand of unmasked operations undefined on purpose, which
// -W(maybe-)uninitialized reports at every use, so those warnings are off in these files.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
