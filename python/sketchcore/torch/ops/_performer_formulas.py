"""Performer attention's formulas in composite torch operations: the second-order gradients' path
of ``sketchcore::performer_attention`` and the math of :mod:`sketchcore.torch.layers._attention`'s layer
(the notation and the feature map are documented there). Memory is linear in the sequence length
(causal attention runs over chunks with a running state), but the L × m features exist as tensors.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

# Causal block length: each block costs a masked chunk² product per batch and head plus a few
# launches, so GPUs (launch-bound at 128) take longer blocks than CPUs.
_CHUNK = {"cpu": 128, "cuda": 1024}


def _features(x: Tensor, W: Tensor, kernel_fn: str, is_query: bool, causal: bool) -> Tensor:
    """φ(x) for x (B, H, L, d) and W (m, d): (B, H, L, m), in at least float32. Causal softmax
    keys: their exponents dash − |x'|²/2 instead (:func:`_causal_softmax_attention` forms them)."""
    compute = torch.promote_types(x.dtype, torch.float32)
    x, W = x.to(compute), W.to(compute)
    m, d = W.shape
    if kernel_fn == "relu":
        return F.relu(x @ W.t() / math.sqrt(m)) + 1e-5
    x = x * d ** -0.25
    dash = x @ W.t()
    exponent = dash - x.square().sum(-1, keepdim=True) / 2
    if is_query:
        return (torch.exp(exponent - dash.amax(-1, keepdim=True)) + 1e-5) / math.sqrt(m)
    if causal:
        return exponent
    return (torch.exp(exponent - dash.amax(dim=(-1, -2), keepdim=True)) + 1e-5) / math.sqrt(m)


def _linear_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool) -> Tensor:
    """Σ_j (q_i·k_j) v_j over all j or j ≤ i, for q, k (B, H, L, m) and v (B, H, L, e)."""
    if not causal:
        return q @ (k.transpose(-1, -2) @ v)
    length = q.shape[-2]
    chunk = _CHUNK.get(q.device.type, 128)
    state = q.new_zeros(*q.shape[:-2], q.shape[-1], v.shape[-1])
    mask = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    outputs = []
    for start in range(0, length, chunk):
        stop = min(start + chunk, length)
        qc, kc, vc = q[..., start:stop, :], k[..., start:stop, :], v[..., start:stop, :]
        block = (qc @ kc.transpose(-1, -2)).masked_fill(~mask[:stop - start, :stop - start], 0.0)
        outputs.append(qc @ state + block @ vc)
        state = state + kc.transpose(-1, -2) @ vc
    return torch.cat(outputs, dim=-2)


def _causal_softmax_attention(phi_q: Tensor, exponent: Tensor, v: Tensor, key_weights: Optional[Tensor]) -> Tensor:
    """Σ_{j ≤ i} (φ(q_i)·φ(k_j)) v_j for causal softmax keys given by their exponents (B, H, L, m),
    with each query's keys taken relative to the running maximum C_i of r_j = max_f exponent_jf
    (j ≤ i): φ(k_j) = m^(-1/2)·exp(exponent_j − r_j)·exp(r_j − C_i), both factors ≤ 1, so nothing
    overflows, and the key holding C_i keeps the normaliser ≥ 1e-5/m. The constants are detached:
    each query's ratio does not depend on them, so their gradient is zero."""
    m = exponent.shape[-1]
    r = exponent.amax(-1).detach()
    running = torch.cummax(r, dim=-1).values
    g = torch.exp(exponent - r[..., None]) / math.sqrt(m)
    if key_weights is not None:
        g = g * key_weights.to(g.dtype)[:, None, :, None]
    length, chunk = phi_q.shape[-2], _CHUNK.get(phi_q.device.type, 128)
    state = phi_q.new_zeros(*phi_q.shape[:-2], m, v.shape[-1])
    state_constant = r.new_full(r.shape[:-1], -math.inf)
    mask = torch.ones(chunk, chunk, dtype=torch.bool, device=phi_q.device).tril()
    outputs = []
    for start in range(0, length, chunk):
        stop = min(start + chunk, length)
        qc, gc, vc = phi_q[..., start:stop, :], g[..., start:stop, :], v[..., start:stop, :]
        rc, Cc = r[..., start:stop], running[..., start:stop]
        # exp(r_j − C_i) for j ≤ i in the chunk (masked entries −inf: exactly 0).
        scale = (rc[..., None, :] - Cc[..., :, None]).masked_fill(~mask[:stop - start, :stop - start], -math.inf)
        block = (qc @ gc.transpose(-1, -2)) * torch.exp(scale)
        earlier = torch.exp(state_constant[..., None] - Cc)[..., None]
        outputs.append(earlier * (qc @ state) + block @ vc)
        new_constant = Cc[..., -1]
        kept = torch.exp(rc - new_constant[..., None])[..., None] * gc
        state = torch.exp(state_constant - new_constant)[..., None, None] * state + kept.transpose(-1, -2) @ vc
        state_constant = new_constant
    return torch.cat(outputs, dim=-2)


def reference_attention(q: Tensor, k: Tensor, v: Tensor, W: Tensor, kernel_fn: str, causal: bool,
                        key_weights: Optional[Tensor] = None, value_weights: Optional[Tensor] = None) -> Tensor:
    """Performer attention in composite torch operations, in at least float32, for q (B, H, L, d),
    k (B, H, S, d), v (B, H, S, e): φ(k) times key_weights (B, S), v times value_weights
    (B, H, S) in the numerator only, the normaliser as a column of ones appended to v (the
    formulas of sketchcore's kernels, and this layer's implementation before them)."""
    phi_q = _features(q, W, kernel_fn, True, causal)
    phi_k = _features(k, W, kernel_fn, False, causal)
    v = v.to(phi_q.dtype)
    if value_weights is not None:
        v = v * value_weights.to(v.dtype)[..., None]
    ones = torch.ones(*v.shape[:-1], 1, dtype=v.dtype, device=v.device)
    if causal and kernel_fn == "softmax":
        both = _causal_softmax_attention(phi_q, phi_k, torch.cat([v, ones], dim=-1), key_weights)
    else:
        if key_weights is not None:
            phi_k = phi_k * key_weights.to(phi_k.dtype)[:, None, :, None]
        both = _linear_attention(phi_q, phi_k, torch.cat([v, ones], dim=-1), causal)
    numerator, normaliser = both[..., :-1], both[..., -1:]
    # out = numerator / max(normaliser, tiny), as the kernels; where the normaliser is below tiny (a
    # query whose keys all have weight 0) nothing moves the output, and the gradient is 0 there, not
    # dout/tiny times zero features (inf·0 = NaN in float32).
    tiny = torch.finfo(normaliser.dtype).tiny
    kept = normaliser >= tiny
    safe = torch.where(kept, normaliser, torch.ones_like(normaliser))
    return torch.where(kept, numerator / safe, numerator.detach() / tiny)
