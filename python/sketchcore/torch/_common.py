"""The private helpers shared by every part of ``sketchcore.torch`` (ops, layers, compression,
tensor parallelism), kept in this one place: argument checks, and sketchcore's activations as
torch functions (for the composite formulas that mirror the core's fused epilogues)."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

import sketchcore

#: The activation names the core's epilogues accept.
ACTIVATIONS = sketchcore.ACTIVATIONS

#: The same activations as torch functions.
TORCH_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "none": lambda z: z,
    "relu": torch.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda z: F.gelu(z, approximate="tanh"),
    "silu": F.silu,
}


def positive_int(value: object, name: str, where: str) -> int:
    """`value` if it is an int ≥ 1 (not a bool), else a ValueError naming `where` and `name`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where}: {name}: expected an integer ≥ 1, got {value!r}")
    return value


def checked_activation(activation: str, where: str, argument: str = "activation") -> str:
    """`activation` if the core knows it, else a ValueError listing the ones it knows."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"{where}: {argument}: expected one of {ACTIVATIONS}, got {activation!r}")
    return activation
