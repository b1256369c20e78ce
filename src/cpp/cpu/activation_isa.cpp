#include "cpu/activation_isa.hpp"

#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace sketchcore::detail {

bool activation_isa_supported(ActivationIsa isa) noexcept {
  switch (isa) {
    case ActivationIsa::portable: return true;
#if SKETCHCORE_ACTIVATIONS_X86
    case ActivationIsa::avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case ActivationIsa::avx512: return __builtin_cpu_supports("avx512f");
#else
    default: return false;
#endif
  }
  return false;
}

ActivationIsa activation_isa() noexcept {
  static const ActivationIsa chosen = [] {
    // An unknown setting caps nothing (python -m sketchcore info shows the setting and the choice).
    const char* cap = std::getenv("SKETCHCORE_CPU_ACTIVATIONS");
    ActivationIsa best = ActivationIsa::avx512;
    if (cap != nullptr && std::strcmp(cap, "avx2") == 0) best = ActivationIsa::avx2;
    if (cap != nullptr && std::strcmp(cap, "portable") == 0) best = ActivationIsa::portable;
    for (ActivationIsa isa : {ActivationIsa::avx512, ActivationIsa::avx2}) {
      if (isa <= best && activation_isa_supported(isa)) return isa;
    }
    return ActivationIsa::portable;
  }();
  return chosen;
}

ActivationKernels::Forward ActivationKernels::forward(Activation act) const noexcept {
  switch (act) {
    case Activation::gelu: return gelu_forward;
    case Activation::gelu_tanh: return gelu_tanh_forward;
    case Activation::silu: return silu_forward;
    case Activation::none:
    case Activation::relu: break;
  }
  return nullptr;
}

ActivationKernels::Backward ActivationKernels::backward(Activation act) const noexcept {
  switch (act) {
    case Activation::gelu: return gelu_backward;
    case Activation::gelu_tanh: return gelu_tanh_backward;
    case Activation::silu: return silu_backward;
    case Activation::none:
    case Activation::relu: break;
  }
  return nullptr;
}

const ActivationKernels& activation_kernels(ActivationIsa isa) noexcept {
#if SKETCHCORE_ACTIVATIONS_X86
  if (isa == ActivationIsa::avx512) return kAvx512ActivationKernels;
  if (isa == ActivationIsa::avx2) return kAvx2ActivationKernels;
#endif
  (void)isa;
  return kPortableActivationKernels;
}

const char* activation_isa_name(ActivationIsa isa) noexcept {
  switch (isa) {
    case ActivationIsa::avx512: return "avx512";
    case ActivationIsa::avx2: return "avx2";
    case ActivationIsa::portable: break;
  }
  return "portable";
}

}  // namespace sketchcore::detail
