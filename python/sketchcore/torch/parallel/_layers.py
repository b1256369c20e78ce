"""What tensor parallelism needs to know of each sketched layer: which factors sit on the input
side (S: d_in × rank) and which on the output side (U: rank × d_out), along which dimensions,
and the layer's product on local shards.

A layer is ``y = act(scale · Σ_t σ(x S_t) U_t + b)``: ``LowRankLinear`` has one term (S, U), scale
1 and an optional inner activation σ; ``SKLinear`` has the 2T terms ``[S1s; U2s]``, ``[U1s; S2s]``
and scale 1/(2T). Every style keeps the term dimension whole (it would change SKLinear's scale)
and shards one of d_in, rank or d_out.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from torch import Tensor, nn

from sketchcore.torch._common import TORCH_ACTIVATIONS
from sketchcore.torch.ops._functional import sketched_linear, sklinear
from sketchcore.torch.layers._lowrank import LowRankLinear
from sketchcore.torch.layers._sklinear import SKLinear



@dataclass(frozen=True)
class Factor:
    """A factor's attribute name and the dimensions of its sizes: ``outer`` is d_in for an
    input-side factor, d_out for an output-side one; ``rank`` the rank dimension."""
    name: str
    outer: int
    rank: int


@dataclass(frozen=True)
class LayerLayout:
    """The factors of a sketched layer, input side (S) and output side (U)."""
    input_side: tuple[Factor, ...]
    output_side: tuple[Factor, ...]
    rank_name: str  # the constructor's name of the sharded rank, for messages


_LAYOUTS = {
    LowRankLinear: LayerLayout((Factor("S", 0, 1),), (Factor("U", 1, 0),), "rank"),
    SKLinear: LayerLayout((Factor("S1s", 1, 2), Factor("U2s", 1, 2)), (Factor("U1s", 2, 1), Factor("S2s", 2, 1)),
                          "low_rank"),
}

SKETCHED_LAYERS: tuple[type, ...] = tuple(_LAYOUTS)


def layout_of(module: nn.Module) -> Optional[LayerLayout]:
    """The layout of a sketched layer; None for any other module."""
    for kind, layout in _LAYOUTS.items():
        if isinstance(module, kind):
            return layout
    return None


def inner_activation(module: nn.Module) -> str:
    """The layer's bottleneck activation σ ("none" for layers without one)."""
    return getattr(module, "inner_activation", None) or "none"


def rank_of(module: nn.Module) -> int:
    return module.rank if isinstance(module, LowRankLinear) else module.low_rank


def local_product(module: nn.Module, x: Tensor, factors: dict[str, Tensor], bias: Optional[Tensor],
                  activation: str) -> Tensor:
    """The layer's fused product on local tensors (sketchcore's operator), with ``factors``
    by name in place of the module's own."""
    if isinstance(module, SKLinear):
        return sklinear(x, factors["S1s"], factors["S2s"], factors["U1s"], factors["U2s"], bias,
                        activation=activation)
    return sketched_linear(x, factors["S"], factors["U"], bias, activation=activation,
                           inner_activation=inner_activation(module))


def packed_factors(module: nn.Module, factors: dict[str, Tensor]) -> tuple[Tensor, Tensor, float]:
    """The layer as one pair of matrices and a scale: ``(A, B, scale)`` with A (d_in, width),
    B (width, d_out), width = T·rank, so that ``y = act(scale · σ(x A) B + b)``."""
    if isinstance(module, SKLinear):
        S = torch.cat([factors["S1s"], factors["U2s"]])  # (2T, d_in, k)
        U = torch.cat([factors["U1s"], factors["S2s"]])  # (2T, k, d_out)
        return S.permute(1, 0, 2).reshape(S.shape[1], -1), U.reshape(-1, U.shape[2]), 1.0 / S.shape[0]
    return factors["S"], factors["U"], 1.0


def second_product(module: nn.Module, z: Tensor, B: Tensor, scale: float, bias: Optional[Tensor],
                   wrap_h: Optional[Callable[[Tensor, Any], Tensor]] = None, group: Any = None) -> Tensor:
    """``act(scale · σ(z) B + bias)`` from the full rank-wide intermediate z = x A; ``wrap_h(h,
    group)`` is applied to h = σ(z) first (a collective on its gradient)."""
    h = TORCH_ACTIVATIONS[inner_activation(module)](z)
    if wrap_h is not None:
        h = wrap_h(h, group)
    y = torch.matmul(h, B)
    if scale != 1.0:
        y = y * scale
    if bias is not None:
        y = y + bias
    return TORCH_ACTIVATIONS[module.activation](y)
