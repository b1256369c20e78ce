"""``quantize_``: int8 (CPU and CUDA) or fp8 (CUDA) factors for the low-rank layers of an already
converted model, in place (torchao's naming). Dense layers are torch's to quantize."""
from __future__ import annotations

import warnings
from typing import Collection, Optional, TypeVar

from torch import nn

from sketchcore.torch.compress._surgery import set_module
from sketchcore.torch.layers._fp8 import Fp8LowRankLinear
from sketchcore.torch.layers._int8 import Int8LowRankLinear
from sketchcore.torch.layers._lowrank import LowRankLinear
from sketchcore.torch.layers._quantized import QuantizedLowRankLinear
from sketchcore.torch.layers._sklinear import SKLinear

#: The configurations ``quantize_`` and ``sketch_model(quantize=...)`` know.
QUANTIZE_CONFIGS = ("int8", "fp8")
#: The layer class of each configuration.
QUANTIZED_LAYERS: dict[str, type[QuantizedLowRankLinear]] = {"int8": Int8LowRankLinear, "fp8": Fp8LowRankLinear}

ModuleT = TypeVar("ModuleT", bound=nn.Module)


def check_quantize_config(config: object, where: str) -> None:
    """Raises ValueError naming ``where`` for a configuration that is not known."""
    if not isinstance(config, str) or config not in QUANTIZE_CONFIGS:
        raise ValueError(f"{where}: expected one of {QUANTIZE_CONFIGS}, got {config!r}")


def quantize_layers(model: nn.Module, only: Optional[Collection[str]] = None, config: str = "int8") -> list[str]:
    """Replaces every LowRankLinear and SKLinear of ``model`` (those named in ``only`` when
    given) by its quantized layer of ``config`` (a known one); returns the qualified names replaced
    (a layer registered under several names is quantized once and put at all of them)."""
    layer_type = QUANTIZED_LAYERS[config]
    done: dict[int, QuantizedLowRankLinear] = {}
    names = []
    for name, module in list(model.named_modules(remove_duplicate=False)):
        if not name or not isinstance(module, (LowRankLinear, SKLinear)) or (only is not None and name not in only):
            continue
        if id(module) not in done:
            done[id(module)] = layer_type._from_float(module)
        set_module(model, name, done[id(module)])
        names.append(name)
    return names


def quantize_(model: ModuleT, config: str = "int8") -> ModuleT:
    """Quantizes, in place, the low-rank layers of a model converted by ``sketch_model``:
    each :class:`LowRankLinear` and :class:`SKLinear` becomes an :class:`Int8LowRankLinear`
    (``"int8"``: int8 factors with per-column scales, inference on the CPU, or on CUDA behind the
    gated path ``cuda_int8_factors``) or an :class:`Fp8LowRankLinear` (``"fp8"``: e4m3 factors,
    inference on CUDA devices of compute capability 8.9 or newer, behind ``cuda_fp8_factors``).
    Returns ``model``; the new layers are on the CPU (move the model with ``.to(device)``).

    Dense ``nn.Linear`` layers (an excluded ``lm_head``, say) are left alone: torch quantizes
    them, and its recipe leaves sketchcore's layers alone in turn::

        model = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)

    The quantized layers run in eval mode without autograd: call ``model.eval()`` and run under
    ``torch.no_grad()`` or ``torch.inference_mode()``.

    Parameters
    ----------
    model : nn.Module
        A model holding LowRankLinear or SKLinear layers (not one such layer itself: use
        :meth:`Int8LowRankLinear.from_float` or :meth:`Fp8LowRankLinear.from_float`).
    config : {"int8", "fp8"}

    Returns
    -------
    nn.Module
        ``model``.

    Raises
    ------
    ValueError
        An unknown ``config``.
    TypeError
        ``model`` is not an ``nn.Module``, or is itself a LowRankLinear/SKLinear (it cannot be
        replaced in place).

    Warns
    -----
    UserWarning
        When the model holds no layer to quantize.

    Examples
    --------
    >>> from sketchcore.torch import sketch_model
    >>> model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
    >>> _ = sketch_model(model, low_rank=8, exclude=["2"])
    >>> quantize_(model, "int8")[0]
    Int8LowRankLinear(in_features=64, out_features=64, rank=8, bias=True, activation='none', quantize='int8')
    >>> quantize_(model, "int4")
    Traceback (most recent call last):
    ValueError: quantize_: config: expected one of ('int8', 'fp8'), got 'int4'
    """
    check_quantize_config(config, "quantize_: config")
    if not isinstance(model, nn.Module):
        raise TypeError(f"quantize_: model: expected a torch.nn.Module, got {type(model).__name__}")
    if isinstance(model, (LowRankLinear, SKLinear)):
        raise TypeError(f"quantize_: model: expected a model holding low-rank layers, got a {type(model).__name__} "
                        "itself (it cannot be replaced in place): use Int8LowRankLinear.from_float(layer) or "
                        "Fp8LowRankLinear.from_float(layer)")
    if not quantize_layers(model, config=config):
        warnings.warn("quantize_: the model holds no LowRankLinear or SKLinear layer to quantize (convert it with "
                      "sketch_model first; torch's quantize_dynamic quantizes nn.Linear)", UserWarning, stacklevel=2)
    return model
