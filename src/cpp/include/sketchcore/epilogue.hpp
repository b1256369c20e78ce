/// @file epilogue.hpp
/// @brief The element-wise epilogue applied to a GEMM result: scale, bias, activation.
#pragma once

#include <optional>
#include <string_view>

#include "sketchcore/export.hpp"
#include "sketchcore/tensor.hpp"

namespace sketchcore {

/// Activation applied after scale and bias.
enum class Activation : unsigned char {
  none,       ///< identity
  relu,       ///< max(z, 0); NaN stays NaN
  gelu,       ///< exact GELU: z·Φ(z) = ½·z·(1 + erf(z/√2))
  gelu_tanh,  ///< tanh approximation: ½·z·(1 + tanh(√(2/π)·(z + 0.044715·z³)))
  silu,       ///< z·σ(z) = z / (1 + e^(−z))
};

/// Returns the activation's name as accepted by parse_activation ("none", "relu", ...).
SKETCHCORE_API const char* activation_name(Activation activation) noexcept;

/// Parses "none", "relu", "gelu", "gelu_tanh" or "silu".
/// @throws std::invalid_argument naming the argument `activation`, the accepted names and `name`
SKETCHCORE_API Activation parse_activation(std::string_view name);

/// What happens to each element z of `scale · (x·S)·U` before it is stored:
/// `y = activation(scale · z + bias[column])`.
struct Epilogue {
  double scale = 1.0;               ///< multiplies the product (folded into the GEMM)
  std::optional<TensorView> bias;   ///< 1-D, length d_out, any stride; none = no bias
  Activation activation = Activation::none;  ///< applied last
};

}  // namespace sketchcore
