"""Captures XᵀX of the inputs of Linear and Conv2d layers (the unfolded patches for a conv)
while the dense model is evaluated once, for the output-error curves of ``_candidates``."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import torch
from torch import nn
from torch.nn import functional as F

#: Layers whose fan-in exceeds this keep weight-error curves (their Gram would be too large).
MAX_FAN_IN = 4096
#: Rows (tokens, pixels) folded into a Gram matrix per call, at most (a strided subsample beyond).
MAX_ROWS = 65536


def _rows(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    if isinstance(layer, nn.Linear):
        return x.reshape(-1, layer.in_features)
    assert isinstance(layer, nn.Conv2d)
    padding = layer.padding if not isinstance(layer.padding, str) else [
        d * (k - 1) // 2 for d, k in zip(layer.dilation, layer.kernel_size)] if layer.padding == "same" else 0
    patches = F.unfold(x, layer.kernel_size, layer.dilation, padding, layer.stride)  # (B, in·kh·kw, L)
    return patches.transpose(1, 2).reshape(-1, patches.shape[1])


@contextmanager
def capture(layers: dict[str, nn.Module]) -> Iterator[dict[str, torch.Tensor]]:
    """Within the block, every forward of the given layers adds its inputs' Gram matrix
    (float64, on the CPU) to the yielded dict, keyed by layer name."""
    grams: dict[str, torch.Tensor] = {}
    handles = []
    for name, layer in layers.items():
        fan_in = layer.in_features if isinstance(layer, nn.Linear) else (
            layer.in_channels * layer.kernel_size[0] * layer.kernel_size[1] if isinstance(layer, nn.Conv2d) else 0)
        if not 0 < fan_in <= MAX_FAN_IN:
            continue

        def hook(module: nn.Module, inputs: Any, name: str = name) -> None:
            with torch.no_grad():
                rows = _rows(module, inputs[0].detach())
                if rows.shape[0] > MAX_ROWS:
                    rows = rows[:: -(-rows.shape[0] // MAX_ROWS)]
                rows = rows.to("cpu", torch.float64)
                grams[name] = grams.get(name, 0) + rows.T @ rows

        handles.append(layer.register_forward_pre_hook(hook))
    try:
        yield grams
    finally:
        for handle in handles:
            handle.remove()
