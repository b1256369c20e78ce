"""The rows whose Gram matrix XᵀX the tuner captures, through conversion's hooks
(``sketchcore.torch.compress._calibrate.gram_hooks``), while the dense model is evaluated once: a
Linear's inputs, a Conv2d's unfolded patches."""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch import nn
from torch.nn import functional as F

from sketchcore.torch.compress._calibrate import gram_hooks

#: Layers whose fan-in exceeds this keep weight-error curves (their Gram would be too large).
MAX_FAN_IN = 4096
#: Rows (tokens, pixels) folded into a Gram matrix per call, at most (a strided subsample beyond).
MAX_ROWS = 65536


def _rows_of(layer: nn.Module) -> Optional[Callable[[torch.Tensor], torch.Tensor]]:
    """The function from the layer's input to its rows (float64, on the CPU); None for a layer
    without a Gram matrix (attention, a fan-in above MAX_FAN_IN)."""
    if isinstance(layer, nn.Linear):
        fan_in = layer.in_features
    elif isinstance(layer, nn.Conv2d):
        fan_in = layer.in_channels * layer.kernel_size[0] * layer.kernel_size[1]
    else:
        return None

    def rows_of(x: torch.Tensor) -> torch.Tensor:
        if isinstance(layer, nn.Linear):
            rows = x.reshape(-1, layer.in_features)
        else:
            padding: Any = layer.padding if not isinstance(layer.padding, str) else [
                d * (k - 1) // 2 for d, k in zip(layer.dilation, layer.kernel_size)] if layer.padding == "same" else 0
            patches = F.unfold(x, layer.kernel_size, layer.dilation, padding, layer.stride)  # (B, in·kh·kw, L)
            rows = patches.transpose(1, 2).reshape(-1, patches.shape[1])
        if rows.shape[0] > MAX_ROWS:
            rows = rows[:: -(-rows.shape[0] // MAX_ROWS)]
        return rows.to("cpu", torch.float64)
    return rows_of if fan_in <= MAX_FAN_IN else None


def capture(layers: dict[str, nn.Module]) -> Any:
    """A context manager: within it, every forward of the given layers adds its inputs' Gram
    matrix (float64, on the CPU) to the yielded dict, keyed by layer name."""
    hooked = {name: (layer, rows) for name, layer in layers.items() if (rows := _rows_of(layer)) is not None}
    return gram_hooks(hooked)
