"""sketch_model's pretraining conversion (``init="random"``, ``inner_activation``): which option
combinations it refuses, and the balanced random factors it draws for a freshly initialised model."""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

import sketchcore


def check_pretraining_options(layer: str, init: str, inner_activation: Optional[str], calibrated: bool) -> None:
    """The refusals of ``init="random"`` and ``inner_activation`` (sketch_model's Raises)."""
    valid = sketchcore.ACTIVATIONS
    if inner_activation is not None and inner_activation not in valid:
        raise ValueError(f"sketch_model: inner_activation: expected one of {valid} or None, got {inner_activation!r}")
    nonlinear = inner_activation not in (None, "none")
    if nonlinear and layer != "lowrank":
        raise ValueError(f"sketch_model: inner_activation: expected layer='lowrank' (only LowRankLinear has a "
                         f"bottleneck activation), got layer={layer!r} with inner_activation={inner_activation!r}")
    if nonlinear and init != "random":
        raise ValueError(f"sketch_model: inner_activation: expected init='random' (a freshly initialised model to "
                         f"pretrain), got init={init!r}: a trained layer's SVD factors approximate x W, not "
                         f"σ(x S) U, so converting a trained model with an inner activation is refused")
    if init == "random" and layer != "lowrank":
        raise ValueError(f"sketch_model: init: 'random' draws LowRankLinear factors, expected layer='lowrank', "
                         f"got layer={layer!r}")
    if init == "random" and calibrated:
        raise ValueError("sketch_model: calibration: expected None with init='random' (random factors do not "
                         "depend on the data)")


def random_balanced_factors(M: Tensor, rank: int) -> tuple[Tensor, Tensor]:
    """Random S (in × rank) and U (rank × out) for pretraining, drawn N(0, s²) each with
    s² = σ_W / √rank, σ_W the standard deviation of the freshly initialised M: then every
    entry of S·U has variance rank·s⁴ = σ_W², the dense init's, and both factors have the same
    scale (balanced, as CoLA draws them)."""
    sigma = float(M.detach().to(torch.float64).std()) if M.numel() > 1 else 0.0
    std = (sigma / rank ** 0.5) ** 0.5
    n_in, n_out = M.shape
    return (torch.randn(n_in, rank, dtype=M.dtype, device=M.device) * std,
            torch.randn(rank, n_out, dtype=M.dtype, device=M.device) * std)
