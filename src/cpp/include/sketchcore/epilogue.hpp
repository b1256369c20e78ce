/// @file epilogue.hpp
/// @brief The element-wise epilogue applied to a GEMM result: scale, bias, activation.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

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

/// Every activation, in declaration order (their names are the ones the bindings accept).
SKETCHCORE_API std::vector<Activation> all_activations();

/// Parses "none", "relu", "gelu", "gelu_tanh" or "silu".
/// @throws std::invalid_argument naming the argument `activation`, the accepted names and `name`
SKETCHCORE_API Activation parse_activation(std::string_view name);

/// What happens to each element z of `(x·S)·U` before it is stored:
/// `y = dropout(activation(scale · z + bias[column]))`.
///
/// Dropout is inverted dropout: an element is kept with probability 1 − p and then
/// multiplied by 1/(1 − p); p = 1 drops everything. The keep decision of output element
/// (row, col) — row counted over all leading dimensions of the output — is a pure
/// function of (seed, row, col) drawn from Philox4x32-10:
///   counter = (col / 4, row mod 2^32, row / 2^32, 0x44524F50 "DROP"),
///   key = (seed mod 2^32, seed / 2^32), word = output[col mod 4],
///   dropped ⇔ word < round(p · 2^32).
/// The mask is therefore the same for any thread count, panel size or device, and a
/// backward pass regenerates it from the seed instead of storing it.
///
/// `inner_activation` σ (CoLA-style bottleneck layers) acts on the intermediate instead:
/// `y = dropout(activation(scale · Σ_t σ(x·S_t)·U_t + bias))`. It is the first product's
/// epilogue on the rows × T·k intermediate; the intermediate a forward saves for the backward
/// is the pre-activation Z = x·[S_1 … S_T], from which the backward recomputes σ(Z) and σ′(Z).
struct Epilogue {
  double scale = 1.0;               ///< multiplies the product (folded into the GEMM)
  std::optional<TensorView> bias;   ///< 1-D, length d_out, any stride; none = no bias
  Activation activation = Activation::none;  ///< applied after scale and bias
  double dropout_p = 0.0;           ///< probability of dropping an element, in [0, 1]
  std::uint64_t seed = 0;           ///< dropout seed
  Activation inner_activation = Activation::none;  ///< σ on the intermediate x·S (none: linear)
};

}  // namespace sketchcore
