/// @file performer.hpp
/// @brief Performer (FAVOR+) attention: linear-time attention through random features,
/// with the feature map computed inside the kernels (no L × m feature tensor in memory).
#pragma once

#include <cstdint>
#include <optional>

#include "sketchcore/export.hpp"
#include "sketchcore/tensor.hpp"

namespace sketchcore {

/// The feature map φ of performer_attention, for a head-dimension row x (d entries) and the
/// random features W (m × d):
///
/// - `softmax`: FAVOR+'s positive features. x' = x·d^(−1/4), dash = x'·Wᵀ,
///   φ(x) = m^(−1/2)·(exp(dash − |x'|²/2 − c) + 1e-5) with c = max over the features of dash
///   for queries; for keys, c = the maximum of dash over the features and all S keys of the
///   (batch, head) (one constant). In causal mode keys have no 1e-5, so any constant shared by a
///   query's keys cancels in its ratio: c is the running maximum of the keys' exponents
///   max_f dash − |k'|²/2 (keys of weight 0 excluded), taken where the kernels start a run of
///   tokens and never from a later token (outputs do not depend on later tokens, to the bit), with
///   the earlier keys' sums rescaled as it grows: stable at any head dimension in float32.
/// - `relu`: φ(x) = relu(m^(−1/2)·x·Wᵀ) + 1e-5.
enum class PerformerKernel : std::uint8_t {
  softmax,  ///< FAVOR+ positive softmax features
  relu,     ///< relu features
};

/// Returns "softmax" or "relu".
SKETCHCORE_API const char* performer_kernel_name(PerformerKernel kernel) noexcept;

/// What performer_attention computes besides its operands.
struct PerformerOptions {
  PerformerKernel kernel = PerformerKernel::softmax;  ///< the feature map
  bool causal = false;  ///< query i attends to keys j ≤ i only (needs as many keys as queries)
};

/// Gradients to compute in performer_attention_backward; an empty one is not computed.
struct PerformerGradients {
  std::optional<TensorView> q;  ///< dL/dq, shape of q
  std::optional<TensorView> k;  ///< dL/dk, shape of k
  std::optional<TensorView> v;  ///< dL/dv, shape of v
};

/// Computes Performer attention for every batch b and head h:
///
///     out_i = Σ_j (φ(q_i)·φ(k_j))·a_j·w_j·v_j / max(Σ_j (φ(q_i)·φ(k_j))·a_j, tiny)
///
/// over all keys j, or over j ≤ i when `options.causal`; a_j = key_weights[b, j] (1 without),
/// w_j = value_weights[b, h, j] (1 without), tiny the smallest normal number of the compute
/// type. The feature map is options.kernel's (PerformerKernel). Time and memory are linear in
/// the sequence lengths: non-causal attention reduces the keys to one m × (e + 1) state per head
/// and multiplies φ(q) by it; causal attention runs over chunks with a running state and an
/// exact masked product inside each chunk. Sums over keys are formed per block of 128 and joined
/// with Kahan's compensation: in float32 their error is about (128 + 2)·u·Σ|terms| (u = 2⁻²⁴) for
/// any number of keys (2²⁴ all-ones keys give exactly 1). 16-bit operands are computed in float32.
///
/// Operands, all on one device:
/// - `q` (B, H, L, d), `k` (B, H, S, d), `v` (B, H, S, e), `out` (B, H, L, e): one dtype, float16,
///   bfloat16 (computed in float32), float32 or float64; any strides.
/// - `features` W (m, d), m ≥ 1, d ≥ 1: q's dtype or float32.
/// - `key_weights` (B, S), optional: multiplies φ(k_j) in numerator and normaliser (a padding
///   mask of 0 and 1 ignores keys exactly); q's dtype or float32.
/// - `value_weights` (B, H, S), optional: multiplies v_j in the numerator only (attention
///   dropout that removes keys with keep/(1 − p)); q's dtype or float32.
///
/// `out` must not overlap any input and have no two elements at the same address.
/// Thread safety: concurrent calls are safe as long as their outputs do not overlap.
/// @throws shape_error  for a wrong number of dimensions, mismatching extents, causal attention
///                      with S ≠ L, d = 0 or m = 0
/// @throws dtype_error  for an unsupported or mismatching element type
/// @throws device_error for operands on different devices, or on a device this build lacks
/// @throws std::invalid_argument for an `out` that overlaps an input or repeats elements
SKETCHCORE_API void performer_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                                        const TensorView& features, const TensorView& out,
                                        const PerformerOptions& options = {},
                                        const std::optional<TensorView>& key_weights = std::nullopt,
                                        const std::optional<TensorView>& value_weights = std::nullopt);

/// Gradients of performer_attention with respect to q, k and v, given `grad_out` = dL/dout and
/// the forward's `out`; the same operands and options as the forward. For float16/bfloat16
/// operands `out` is recomputed in float32 instead of read (its rounding would enter every
/// gradient); `out` must still be given and valid. The feature map's
/// maxima are differentiated as the forward computes them (a maximum's gradient split evenly
/// among tied entries); features and weights get no gradient. Nothing of size L × m is kept or
/// formed: the states and the features are recomputed block by block, so memory stays linear
/// in the sequence lengths.
///
/// `grad_out` has the shape, dtype and device of `out`; each requested gradient the shape of
/// its input and q's dtype and device, no overlap with any operand or another gradient.
/// @throws shape_error  as performer_attention, and for a wrong `grad_out` or gradient shape
/// @throws dtype_error  as performer_attention, and for a `grad_out` or gradient of another dtype
/// @throws device_error as performer_attention, and for a `grad_out` or gradient on another device
/// @throws std::invalid_argument for gradients that overlap an operand or each other
SKETCHCORE_API void performer_attention_backward(const TensorView& grad_out, const TensorView& q,
                                                 const TensorView& k, const TensorView& v,
                                                 const TensorView& features, const TensorView& out,
                                                 const PerformerOptions& options,
                                                 const std::optional<TensorView>& key_weights,
                                                 const std::optional<TensorView>& value_weights,
                                                 const PerformerGradients& grads);

}  // namespace sketchcore
