"""The private helpers shared by every part of ``sketchcore.torch`` (ops, layers, compression,
tensor parallelism), kept in this one place: argument checks, and sketchcore's activations as
torch functions (for the composite formulas that mirror the core's fused epilogues)."""
from __future__ import annotations

import functools
import sys
from typing import Callable, TypeVar

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


def refuse_legacy_onnx_export(op: str) -> None:
    """Raises, naming the supported call, when torch's TorchScript ONNX exporter
    (``torch.onnx.export(..., dynamo=False)``) traces a sketchcore operator: that exporter has no
    translation of them, and its own error names neither ``dynamo=True`` nor ``export_onnx``.
    Costs one check outside ``torch.jit.trace``; ``torch.onnx`` is only read if already imported."""
    if torch.jit.is_tracing():
        onnx = sys.modules.get("torch.onnx")
        if onnx is not None and onnx.is_in_onnx_export():
            raise RuntimeError(
                f"sketchcore::{op}: expected torch's dynamo ONNX exporter, got the TorchScript exporter "
                "(torch.onnx.export(..., dynamo=False)), which has no translation of sketchcore's operators: call "
                "sketchcore.torch.export_onnx(model, args, f), or torch.onnx.export(model, args, f, dynamo=True, "
                "custom_translation_table=sketchcore.torch.onnx_translations())")


InitT = TypeVar("InitT", bound=Callable[..., None])


def keyword_hints(where: str, hints: dict[str, str]) -> Callable[[InitT], InitT]:
    """Wraps a constructor so that a keyword another layer uses (``rank=`` for SKLinear,
    ``low_rank=`` for LowRankLinear) is refused naming the keyword this one takes, not with
    Python's bare "unexpected keyword argument"."""
    def wrap(init: InitT) -> InitT:
        @functools.wraps(init)
        def checked(self: object, *args: object, **kwargs: object) -> None:
            for wrong, right in hints.items():
                if wrong in kwargs:
                    raise TypeError(f"{where}: {wrong}: expected the keyword {right}= ({where}'s name for the "
                                    f"rank), got {wrong}={kwargs[wrong]!r}")
            init(self, *args, **kwargs)
        return checked  # type: ignore[return-value]
    return wrap


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
