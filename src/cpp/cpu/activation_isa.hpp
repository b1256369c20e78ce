// The float32 GELU, GELU-tanh and SiLU kernels (forward and derivative) per instruction set, and
// which set runs: the AVX-512 or AVX2 intrinsic kernels (cpu/activations_avx512.cpp,
// cpu/activations_avx2.cpp) or the portable ones (cpu/epilogue_kernels.cpp). Chosen once per
// process: the best the CPU has, capped by SKETCHCORE_CPU_ACTIVATIONS=avx2 or =portable, so that
// every family can be tested and timed on one AVX-512 machine. All are within 4 ulp of the
// float64 functions (tests/cpp/test_epilogue_kernels.cpp), in different bits.
#pragma once

#include <cstdint>

#include "sketchcore/epilogue.hpp"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(SKETCHCORE_NO_CLONES)
#define SKETCHCORE_ACTIVATIONS_X86 1  // the intrinsic kernels are compiled in
#else
#define SKETCHCORE_ACTIVATIONS_X86 0
#endif

namespace sketchcore::detail {

/// The activation kernel families, in order of preference.
enum class ActivationIsa { portable, avx2, avx512 };

/// One family's kernels: forward y[j] = act(y[j] + bias[j]) and backward
/// g[j] = dy[j]·act′(g[j] + bias[j]) for j < n, `bias` contiguous or null, the sum rounded to
/// float32 first.
struct ActivationKernels {
  using Forward = void (*)(float* y, const float* bias, std::int64_t n);
  using Backward = void (*)(const float* dy, float* g, const float* bias, std::int64_t n);
  Forward gelu_forward;
  Backward gelu_backward;
  Forward gelu_tanh_forward;
  Backward gelu_tanh_backward;
  Forward silu_forward;
  Backward silu_backward;

  /// The kernel of `act` (gelu, gelu_tanh or silu; null for the others).
  Forward forward(Activation act) const noexcept;
  Backward backward(Activation act) const noexcept;
};

/// Whether this CPU can run `isa`'s kernels and they were compiled in.
bool activation_isa_supported(ActivationIsa isa) noexcept;

/// The family this process runs: the best supported one, capped by the environment (read once).
ActivationIsa activation_isa() noexcept;

/// "portable", "avx2" or "avx512".
const char* activation_isa_name(ActivationIsa isa) noexcept;

/// `isa`'s kernels, to be called only where activation_isa_supported(isa) (the portable ones
/// for a family that was not compiled in).
const ActivationKernels& activation_kernels(ActivationIsa isa) noexcept;

/// Each family's table, defined in its own file.
extern const ActivationKernels kPortableActivationKernels;
#if SKETCHCORE_ACTIVATIONS_X86
extern const ActivationKernels kAvx2ActivationKernels;
extern const ActivationKernels kAvx512ActivationKernels;
#endif

}  // namespace sketchcore::detail
