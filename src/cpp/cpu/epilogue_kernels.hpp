// The float32 epilogue kernels of the CPU backend: one contiguous row (or part of one) at a
// time, vectorised by the compiler and compiled for several instruction sets, the best one
// chosen when the library loads (cpu/epilogue_kernels.cpp). float64 keeps the scalar
// libm formulas of detail/activations.hpp (cpu/epilogue_cpu.cpp).
#pragma once

#include <cstdint>

#include "sketchcore/epilogue.hpp"

namespace sketchcore::detail {

/// y[j] = act(y[j] + bias[j]) for j < n; `bias` contiguous or null. GELU, GELU-tanh and SiLU
/// by the kernel family of cpu/activation_isa.hpp.
void activation_forward_f32(Activation act, float* y, const float* bias, std::int64_t n) noexcept;

/// g[j] = dy[j] · act′(h[j] + bias[j]) for j < n, in place over h = g; `bias` contiguous or null.
void activation_backward_f32(Activation act, const float* dy, float* g, const float* bias, std::int64_t n) noexcept;

/// The dropout words of columns [4·group0, 4·group0 + 4·groups) of output row `row`:
/// words[4·i + l] = word l of Philox block (row, group0 + i) (detail/philox.hpp).
void dropout_words(std::uint32_t* words, std::uint64_t seed, std::uint64_t row, std::uint64_t group0,
                   std::int64_t groups) noexcept;

/// y[j] = words[j] ≥ threshold ? y[j]·keep_scale : 0 for j < n.
void dropout_apply_f32(float* y, const std::uint32_t* words, std::uint32_t threshold, float keep_scale,
                       std::int64_t n) noexcept;
void dropout_apply_f64(double* y, const std::uint32_t* words, std::uint32_t threshold, double keep_scale,
                       std::int64_t n) noexcept;

}  // namespace sketchcore::detail
