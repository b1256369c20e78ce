// SKETCHCORE_CLONES: compile a function for AVX-512 (x86-64-v4), AVX2 (x86-64-v3) and baseline
// x86-64 and pick one at load time (GCC/Clang function multiversioning through an ifunc, so
// ELF only). Elsewhere, or with SKETCHCORE_NO_CLONES, one plain version.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && defined(__ELF__) && !defined(__INTEL_COMPILER) && \
    !defined(SKETCHCORE_NO_CLONES)
#define SKETCHCORE_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SKETCHCORE_CLONES
#endif
