// The erf-GELU, GELU-tanh and SiLU, forward and derivative, on AVX2 with FMA
// (cpu/activations_avx2.cpp): what activation_forward_f32/activation_backward_f32
// (cpu/epilogue_kernels.hpp) call on CPUs with AVX2 but not AVX-512 (cpu/activation_isa.hpp).
// Near zero, a table polynomial per 8-lane vector (no exp, no division); vectors with an
// argument beyond the tables' range take the far path shared with AVX-512
// (cpu/activation_far_path.hpp). Same 4-ulp bound as the others.
#pragma once

#include <cstdint>

#include "cpu/activation_isa.hpp"

namespace sketchcore::detail {

#if SKETCHCORE_ACTIVATIONS_X86
// Each: y[j] = act(y[j] + bias[j]) or g[j] = dy[j]·act′(g[j] + bias[j]) for j < n, `bias`
// contiguous or null, the sum rounded to float32 first. Only where
// activation_isa_supported(ActivationIsa::avx2).
void gelu_forward_avx2(float* y, const float* bias, std::int64_t n) noexcept;
void gelu_backward_avx2(const float* dy, float* g, const float* bias, std::int64_t n) noexcept;
void silu_forward_avx2(float* y, const float* bias, std::int64_t n) noexcept;
void silu_backward_avx2(const float* dy, float* g, const float* bias, std::int64_t n) noexcept;
void gelu_tanh_forward_avx2(float* y, const float* bias, std::int64_t n) noexcept;
void gelu_tanh_backward_avx2(const float* dy, float* g, const float* bias, std::int64_t n) noexcept;
#endif

}  // namespace sketchcore::detail
