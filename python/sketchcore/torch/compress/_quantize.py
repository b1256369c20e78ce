"""``quantize_``: int8 (CPU and CUDA) or fp8 (CUDA) factors for the low-rank layers of an already
converted model, in place, after torchao's convention (``quantize_(model, config, filter_fn)``, with
config objects that ``sketch_model(quantize=...)`` accepts too; the strings "int8" and "fp8" name the
default configs). One walker, :func:`quantize_layers`, serves both."""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable, ClassVar, Collection, Optional, TypeVar, Union

from torch import nn

from sketchcore.torch.compress._surgery import set_module
from sketchcore.torch.layers._fp8 import Fp8LowRankLinear
from sketchcore.torch.layers._int8 import Int8LowRankLinear
from sketchcore.torch.layers._int8_linear import Int8Linear
from sketchcore.torch.layers._lowrank import LowRankLinear
from sketchcore.torch.layers._quantized import QuantizedLowRankLinear
from sketchcore.torch.layers._sklinear import SKLinear


@dataclass(frozen=True)
class Int8Config:
    """int8 weights with one float32 scale per output column; activations quantized per row at run
    time (symmetric, int32 sums). CPU inference, or CUDA behind the gated path ``cuda_int8_factors``.

    Parameters
    ----------
    dense : bool
        Also turn plain ``nn.Linear`` layers into :class:`Int8Linear` (the full-rank weight in int8,
        one int8 GEMM): the layers a conversion left dense, an ``lm_head``. Default False: only
        the low-rank layers are quantized. Only :func:`quantize_` takes it (``sketch_model``
        quantizes the layers it converts).
    """

    dense: bool = False
    #: the format's name (the string form of this config)
    format: ClassVar[str] = "int8"


@dataclass(frozen=True)
class Fp8Config:
    """``float8_e4m3fn`` factors with per-column scales, for CUDA devices of compute capability 8.9
    or newer (behind the gated path ``cuda_fp8_factors``)."""

    #: the format's name (the string form of this config)
    format: ClassVar[str] = "fp8"


#: A quantization configuration: an object, or the name of a format's default configuration.
QuantizeConfig = Union[Int8Config, Fp8Config]
#: The configurations ``quantize_`` and ``sketch_model(quantize=...)`` know, by name.
QUANTIZE_CONFIGS: dict[str, QuantizeConfig] = {"int8": Int8Config(), "fp8": Fp8Config()}
#: The low-rank layer class of each format (the named subclasses of QuantizedLowRankLinear).
QUANTIZED_LAYERS: dict[str, type[QuantizedLowRankLinear]] = {"int8": Int8LowRankLinear, "fp8": Fp8LowRankLinear}

ModuleT = TypeVar("ModuleT", bound=nn.Module)
FilterFn = Callable[[nn.Module, str], bool]


def as_quantize_config(config: object, where: str) -> QuantizeConfig:
    """``config`` as a config object (a name becomes its default config); a ValueError naming
    ``where`` for anything else."""
    if isinstance(config, (Int8Config, Fp8Config)):
        return config
    if isinstance(config, str) and config in QUANTIZE_CONFIGS:
        return QUANTIZE_CONFIGS[config]
    raise ValueError(f"{where}: expected one of {tuple(QUANTIZE_CONFIGS)}, Int8Config(...) or Fp8Config(), "
                     f"got {config!r}")


def check_quantize_config(config: object, where: str) -> str:
    """The format name of ``config`` (a name or a config object); raises as :func:`as_quantize_config`."""
    return as_quantize_config(config, where).format


def _replacement(module: nn.Module, config: QuantizeConfig) -> Optional[nn.Module]:
    """The quantized form of ``module`` under ``config``, or None when it has none."""
    kind = _replacement_class(module, config)
    if kind is None:
        return None
    if kind == Int8Linear.__name__:
        assert isinstance(module, nn.Linear)
        return Int8Linear.from_float(module)
    assert isinstance(module, (LowRankLinear, SKLinear))
    return QUANTIZED_LAYERS[config.format].from_float(module)


def quantize_layers(model: nn.Module, only: Optional[Collection[str]] = None, config: object = "int8",
                    filter_fn: Optional[FilterFn] = None) -> list[str]:
    """Replaces every layer of ``model`` that ``config`` quantizes (LowRankLinear and SKLinear;
    with ``Int8Config(dense=True)`` plain nn.Linear too) — those named in ``only`` and accepted by
    ``filter_fn(module, name)`` when given — by its quantized layer; returns the qualified names
    replaced (a layer registered under several names is quantized once and put at all of them)."""
    config = as_quantize_config(config, "quantize_: config")
    done: dict[int, Optional[nn.Module]] = {}
    names = []
    for name, module in list(model.named_modules(remove_duplicate=False)):
        if not name or (only is not None and name not in only):
            continue
        if id(module) not in done:
            wanted = filter_fn is None or filter_fn(module, name)
            done[id(module)] = _replacement(module, config) if wanted else None
        new = done[id(module)]
        if new is not None:
            set_module(model, name, new)
            names.append(name)
    return names


def quantize_(model: ModuleT, config: Union[str, QuantizeConfig] = "int8",
              filter_fn: Optional[FilterFn] = None) -> ModuleT:
    """Quantizes, in place, the low-rank layers of a model converted by ``sketch_model`` (torchao's
    ``quantize_(model, config, filter_fn)`` convention): each :class:`LowRankLinear` and
    :class:`SKLinear` becomes an :class:`Int8LowRankLinear` (:class:`Int8Config`, or ``"int8"``:
    int8 factors with per-column scales, inference on the CPU, or on CUDA behind the gated path
    ``cuda_int8_factors``) or an :class:`Fp8LowRankLinear` (:class:`Fp8Config`, or ``"fp8"``: e4m3
    factors, inference on CUDA devices of compute capability 8.9 or newer, behind
    ``cuda_fp8_factors``). ``Int8Config(dense=True)`` also turns the plain ``nn.Linear`` layers (an
    excluded ``lm_head``, layers a conversion kept dense) into :class:`Int8Linear`, sketchcore's
    int8 GEMM on the full-rank weight. Returns ``model``; the new layers are on the CPU (move the
    model with ``.to(device)``).

    The quantized layers run in eval mode without autograd: call ``model.eval()`` and run under
    ``torch.no_grad()`` or ``torch.inference_mode()``.

    Parameters
    ----------
    model : nn.Module
        A model holding LowRankLinear or SKLinear layers (not one such layer itself: use
        :meth:`Int8LowRankLinear.from_float` or :meth:`Fp8LowRankLinear.from_float`).
    config : Int8Config, Fp8Config, "int8" or "fp8"
        The strings name the default configs.
    filter_fn : callable, optional
        ``filter_fn(module, qualified_name) -> bool``: only the layers it accepts are quantized.

    Returns
    -------
    nn.Module
        ``model``.

    Raises
    ------
    ValueError
        An unknown ``config``.
    TypeError
        ``model`` is not an ``nn.Module``, or is itself a layer it would replace (it cannot be
        replaced in place); ``filter_fn`` is not callable.

    Warns
    -----
    UserWarning
        When nothing was quantized (no layer to quantize, or none that ``filter_fn`` accepted).

    Examples
    --------
    >>> from sketchcore.torch import sketch_model
    >>> model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
    >>> _ = sketch_model(model, low_rank=8, exclude=["2"])
    >>> quantize_(model, Int8Config(dense=True))
    Sequential(
      (0): Int8LowRankLinear(in_features=64, out_features=64, rank=8, bias=True, activation='none', quantize='int8')
      (1): ReLU()
      (2): Int8Linear(in_features=64, out_features=8, bias=True, activation='none', quantize='int8')
    )
    >>> quantize_(model, "int4")
    Traceback (most recent call last):
    ValueError: quantize_: config: expected one of ('int8', 'fp8'), Int8Config(...) or Fp8Config(), got 'int4'
    """
    resolved = as_quantize_config(config, "quantize_: config")
    if not isinstance(model, nn.Module):
        raise TypeError(f"quantize_: model: expected a torch.nn.Module, got {type(model).__name__}")
    if _replacement_class(model, resolved) is not None:
        raise TypeError(f"quantize_: model: expected a model holding layers to quantize, got a "
                        f"{type(model).__name__} itself (it cannot be replaced in place): use "
                        f"{_replacement_class(model, resolved)}.from_float(layer)")
    if filter_fn is not None and not callable(filter_fn):
        raise TypeError(f"quantize_: filter_fn: expected a callable (module, name) -> bool, got "
                        f"{type(filter_fn).__name__}")
    if not quantize_layers(model, config=resolved, filter_fn=filter_fn):
        what = "LowRankLinear or SKLinear" + (" or nn.Linear" if isinstance(resolved, Int8Config) and resolved.dense
                                                else "")
        warnings.warn(f"quantize_: nothing was quantized: the model holds no {what} layer"
                      + (" that filter_fn accepted" if filter_fn is not None else "")
                      + " (convert it with sketch_model first, or pass Int8Config(dense=True) for nn.Linear)",
                      UserWarning, stacklevel=2)
    return model


def _replacement_class(module: nn.Module, config: QuantizeConfig) -> Optional[str]:
    """The name of the class ``module`` would become under ``config`` (None: it stays)."""
    if isinstance(module, (LowRankLinear, SKLinear)):
        return QUANTIZED_LAYERS[config.format].__name__
    if isinstance(config, Int8Config) and config.dense and type(module) is nn.Linear:
        return Int8Linear.__name__
    return None
