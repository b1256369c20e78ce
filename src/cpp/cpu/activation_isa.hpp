// Which float32 activation kernels run (GELU, GELU-tanh, SiLU and their derivatives): the
// AVX-512 or AVX2 intrinsic kernels (cpu/activations_avx512.cpp, cpu/activations_avx2.cpp) or
// the portable ones (cpu/epilogue_kernels.cpp). Chosen once per process: the best the CPU has,
// capped by SKETCHCORE_CPU_ACTIVATIONS=avx2 or =portable, so that every implementation can be
// tested and timed on one AVX-512 machine.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(SKETCHCORE_NO_CLONES)
#define SKETCHCORE_ACTIVATIONS_X86 1  // the intrinsic kernels are compiled in
#else
#define SKETCHCORE_ACTIVATIONS_X86 0
#endif

namespace sketchcore::detail {

/// The activation kernel families, in order of preference.
enum class ActivationIsa { portable, avx2, avx512 };

/// Whether this CPU can run `isa`'s kernels and they were compiled in.
bool activation_isa_supported(ActivationIsa isa) noexcept;

/// The kernels this process runs: the best supported one, capped by the environment (read once).
ActivationIsa activation_isa() noexcept;

/// "portable", "avx2" or "avx512".
const char* activation_isa_name(ActivationIsa isa) noexcept;

}  // namespace sketchcore::detail
