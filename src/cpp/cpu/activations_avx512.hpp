// The erf-GELU, GELU-tanh and SiLU, forward and derivative, on AVX-512 (cpu/activations_avx512.cpp).
// Where the CPU has AVX-512F, activation_forward_f32/activation_backward_f32
// (cpu/epilogue_kernels.hpp) call these (cpu/activation_isa.hpp); elsewhere the AVX2 kernels of
// cpu/activations_avx2.cpp or the portable ones of cpu/epilogue_kernels.cpp.
// Same accuracy bound (4 ulp of float64, checked by tests/cpp/test_epilogue_kernels.cpp for
// both), 2–7× the speed: table lookups by permutes (VPERMT2PS) and one-instruction scaling by 2^n
// into the subnormals (VSCALEFPS), which compilers do not emit for portable code.
#pragma once

#include <cstdint>

#include "cpu/activation_isa.hpp"

namespace sketchcore::detail {

#if SKETCHCORE_ACTIVATIONS_X86
// Each: y[j] = act(y[j] + bias[j]) or g[j] = dy[j]·act′(g[j] + bias[j]) for j < n, `bias`
// contiguous or null, the sum rounded to float32 first. Only where
// activation_isa_supported(ActivationIsa::avx512).
void gelu_forward_avx512(float* y, const float* bias, std::int64_t n) noexcept;
void gelu_backward_avx512(const float* dy, float* g, const float* bias, std::int64_t n) noexcept;
void silu_forward_avx512(float* y, const float* bias, std::int64_t n) noexcept;
void silu_backward_avx512(const float* dy, float* g, const float* bias, std::int64_t n) noexcept;
void gelu_tanh_forward_avx512(float* y, const float* bias, std::int64_t n) noexcept;
void gelu_tanh_backward_avx512(const float* dy, float* g, const float* bias, std::int64_t n) noexcept;
#endif

}  // namespace sketchcore::detail
