"""Healing a quantized model: its 8-bit layers are inference only (no gradients pass through
them), so for the duration of :func:`heal` each one is replaced by a float layer computing its
dequantized map — a trainable :class:`LowRankLinear` for a low-rank 8-bit layer, a frozen
``nn.Linear`` for a full-rank :class:`Int8Linear` — and afterwards each low-rank stand-in is
quantized again, in its original format, from the factors it was trained to, while the
full-rank layers are put back as they were. The model is healed before its quantization, as the
recipe says, without the user having to keep the float model around."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from sketchcore.torch.compress._surgery import set_module
from sketchcore.torch.layers._int8_linear import Int8Linear
from sketchcore.torch.layers._lowrank import LowRankLinear
from sketchcore.torch.layers._quantized import QuantizedLowRankLinear


def _standin(layer: nn.Module) -> nn.Module:
    """The float layer computing ``layer``'s dequantized map, in eval mode."""
    if isinstance(layer, QuantizedLowRankLinear):
        S, U = layer.dequantized_factors()
        new = LowRankLinear(layer.in_features, layer.out_features, layer.rank, bias=layer.bias is not None,
                            activation=layer.activation, inner_activation=layer.inner_activation,
                            device=S.device)
        with torch.no_grad():
            new.S.copy_(S)
            new.U.copy_(U)
            if layer.bias is not None:
                new.bias.copy_(layer.bias)  # type: ignore[union-attr]
        return new.eval()
    assert isinstance(layer, Int8Linear)
    linear = layer.to_linear().requires_grad_(False)
    if layer.activation == "none":
        return linear.eval()
    # the activation the layer fuses, as its own module after the product
    activation = {"relu": nn.ReLU(), "gelu": nn.GELU(), "gelu_tanh": nn.GELU(approximate="tanh"),
                  "silu": nn.SiLU()}[layer.activation]
    return nn.Sequential(linear, activation).eval()


@contextlib.contextmanager
def float_standins(model: nn.Module) -> Iterator[int]:
    """Within the block, every 8-bit layer of ``model`` (under each of its names) is replaced by
    its float stand-in; yields how many were replaced. On leaving, the low-rank stand-ins are
    quantized again in their layer's format and the full-rank int8 layers restored unchanged."""
    originals: dict[int, nn.Module] = {}
    standins: dict[int, nn.Module] = {}
    places: list[tuple[str, int]] = []
    for name, module in list(model.named_modules(remove_duplicate=False)):
        if name and isinstance(module, (QuantizedLowRankLinear, Int8Linear)):
            if id(module) not in standins:
                originals[id(module)] = module
                standins[id(module)] = _standin(module)
            places.append((name, id(module)))
    for name, key in places:
        set_module(model, name, standins[key])
    finished = False
    try:
        yield len(standins)
        finished = True
    finally:
        back: dict[int, nn.Module] = {}
        for key, original in originals.items():
            standin = standins[key]
            if finished and isinstance(original, QuantizedLowRankLinear):
                assert isinstance(standin, LowRankLinear)
                requantized = type(original)._from_float(standin, format=original.format).to(original.S_q.device)
                back[key] = requantized.train(original.training)
            else:  # a full-rank layer (frozen), or healing failed: the layer as it was
                back[key] = original
        for name, key in places:
            set_module(model, name, back[key])
