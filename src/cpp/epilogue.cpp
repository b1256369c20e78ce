#include "sketchcore/epilogue.hpp"

#include <iterator>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "detail/check.hpp"

namespace sketchcore {

namespace {
constexpr Activation kAllActivations[] = {Activation::none, Activation::relu, Activation::gelu,
                                          Activation::gelu_tanh, Activation::silu};
}

const char* activation_name(Activation activation) noexcept {
  switch (activation) {
    case Activation::none: return "none";
    case Activation::relu: return "relu";
    case Activation::gelu: return "gelu";
    case Activation::gelu_tanh: return "gelu_tanh";
    case Activation::silu: return "silu";
  }
  return "unknown";
}

Activation parse_activation(std::string_view name) {
  return detail::parse_named(name, kAllActivations, &activation_name, "sketched_matmul", "activation");
}

std::vector<Activation> all_activations() {
  return std::vector<Activation>(std::begin(kAllActivations), std::end(kAllActivations));
}

}  // namespace sketchcore
