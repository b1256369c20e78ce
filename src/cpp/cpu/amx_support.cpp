// CPU and operating-system support of the AMX tiles (cpu/amx_support.hpp).
#include "cpu/amx_support.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace sketchcore::detail {

namespace {

/// EDX of CPUID leaf 7, sub-leaf 0 (0 where there is no such leaf or no x86 CPU).
unsigned leaf7_edx() noexcept {
#if defined(__x86_64__) && defined(__GNUC__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return 0;
  return edx;
#else
  return 0;
#endif
}

constexpr unsigned kAmxBf16Bit = 22;
constexpr unsigned kAmxTileBit = 24;

}  // namespace

bool amx_tiles_permitted() noexcept {
  static const bool permitted = [] {
    if (((leaf7_edx() >> kAmxTileBit) & 1u) == 0) return false;
#if defined(__linux__) && defined(__x86_64__)
    // Linux hands out the 8 KiB tile state only on request (ARCH_REQ_XCOMP_PERM = 0x1023 for
    // XFEATURE_XTILEDATA = 18); the grant covers every thread of the process.
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#else
    return false;
#endif
  }();
  return permitted;
}

bool amx_bf16_supported() noexcept {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool supported = ((leaf7_edx() >> kAmxBf16Bit) & 1u) != 0 && __builtin_cpu_supports("avx512f") &&
                                __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512bf16") &&
                                amx_tiles_permitted();
  return supported;
#else
  return false;
#endif
}

}  // namespace sketchcore::detail
