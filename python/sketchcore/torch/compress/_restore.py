"""Rebuilding a compressed model from its state_dict: ``restore_model`` puts an empty sketchcore
layer of each saved configuration in place, then loads the weights (no conversion, no dense
weight needed)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch  # noqa: F401 - the docstring examples use it
from torch import nn

from sketchcore.torch.compress._surgery import no_fused_encoders, set_module
from sketchcore.torch.layers._attention import RandMultiHeadAttention
from sketchcore.torch.layers._conv import SKConv2d
from sketchcore.torch.layers._fp8 import Fp8LowRankLinear
from sketchcore.torch.layers._int8 import Int8LowRankLinear
from sketchcore.torch.layers._int8_linear import Int8Linear
from sketchcore.torch.layers._quantized import QuantizedLayer, QuantizedLowRankLinear
from sketchcore.torch.layers._layer_state import inferred_linear_configs, saved_layer_configs
from sketchcore.torch.layers._lowrank import LowRankLinear
from sketchcore.torch.layers._sklinear import SKLinear

__all__ = ["restore_model"]

_LAYERS = {"SKLinear": SKLinear, "LowRankLinear": LowRankLinear, "SKConv2d": SKConv2d,
           "RandMultiHeadAttention": RandMultiHeadAttention, "Int8LowRankLinear": Int8LowRankLinear,
           "Fp8LowRankLinear": Fp8LowRankLinear, "QuantizedLowRankLinear": QuantizedLowRankLinear,
           "Int8Linear": Int8Linear}


def restore_model(model: nn.Module, state_dict: Mapping[str, Any], *, strict: bool = True) -> nn.Module:
    """Loads a compressed model's ``state_dict`` into ``model`` built with its original (dense)
    architecture: every layer the state_dict records as a sketchcore layer (its configuration in
    the state_dict's metadata, which ``torch.save``/``torch.load`` keep) is first replaced by an
    empty one of the saved configuration, then the whole state_dict is loaded. A state_dict
    without metadata (Panther's, or a plain ``dict`` copy) still restores: an ``nn.Linear`` whose
    ``weight`` is missing and whose S1s/S2s/U1s/U2s (or S/U) are present becomes an SKLinear (or
    LowRankLinear) of those shapes, without activation or dropout. No dense weight or conversion is
    needed.

    Parameters
    ----------
    model : nn.Module
        The original (dense) architecture; modified in place.
    state_dict : Mapping[str, Any]
        A compressed model's ``state_dict()``.
    strict : bool
        Passed to ``load_state_dict``.

    Returns
    -------
    nn.Module
        ``model``.

    Raises
    ------
    RuntimeError
        From ``load_state_dict``: missing or unexpected keys (with ``strict``), shape mismatches.
    AttributeError
        A recorded layer name that ``model`` does not have (``get_submodule``).

    Examples
    --------
    >>> from sketchcore.torch import sketch_model
    >>> _ = torch.manual_seed(0)
    >>> model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
    >>> _ = sketch_model(model, low_rank=4)
    >>> fresh = restore_model(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)),
    ...                       model.state_dict())
    >>> type(fresh[0]).__name__
    'LowRankLinear'
    >>> x = torch.randn(3, 16)
    >>> torch.equal(fresh(x), model(x))
    True
    """
    configs = {**inferred_linear_configs(model, state_dict), **saved_layer_configs(state_dict)}
    for name, saved in configs.items():
        config = dict(saved)
        cls = _LAYERS.get(config.pop("sketchcore"))
        if cls is None:
            continue
        old = model.get_submodule(name)
        reference = next(iter(old.parameters()), None) if isinstance(old, nn.Module) else None
        placement = {} if reference is None else {"dtype": reference.dtype, "device": reference.device}
        new = _empty_layer(cls, config, placement)
        if isinstance(new, QuantizedLayer):
            new.train(old.training)  # float layers start in training mode; a quantized one keeps the model's mode
        set_module(model, name, new)
    no_fused_encoders(model)
    model.load_state_dict(state_dict, strict=strict)
    return model


def _empty_layer(cls: type, config: dict[str, Any], placement: dict[str, Any]) -> nn.Module:
    """A layer of the saved configuration, its weights to be loaded from the state_dict."""
    if cls is RandMultiHeadAttention:
        attention = RandMultiHeadAttention(config["embed_dim"], config["num_heads"], config["num_random_features"],
                                           config["dropout"], config["bias"], config["kernel_fn"],
                                           config["iscausal"], seed=config["seed"], **placement)
        attention.batch_first = config.get("batch_first", True)
        return attention
    if cls is SKConv2d:
        return SKConv2d(config["in_channels"], config["out_channels"], tuple(config["kernel_size"]),
                        tuple(config["stride"]), tuple(config["padding"]), config["bias"], config["num_terms"],
                        config["low_rank"], dilation=tuple(config["dilation"]), **placement)
    if issubclass(cls, QuantizedLowRankLinear):  # the saved 8-bit factors, as they are (no dense weight)
        layer: nn.Module = cls(config["in_features"], config["out_features"], config["rank"], bias=config["bias"],
                               activation=config["activation"], inner_activation=config.get("inner_activation"),
                               device=placement.get("device"), format=config["quantize"])
        return layer
    if cls is Int8Linear:
        return Int8Linear(config["in_features"], config["out_features"], bias=config["bias"],
                          activation=config["activation"], device=placement.get("device"))
    if cls is SKLinear:
        new = SKLinear(config["in_features"], config["out_features"], config["num_terms"], config["low_rank"],
                       bias=config["bias"], activation=config["activation"], dropout=config["dropout"],
                       init="linear", **placement)  # the cheapest init: the state_dict replaces the factors
        new.init = config.get("init", "panther")
        return new
    return LowRankLinear(config["in_features"], config["out_features"], config["rank"], bias=config["bias"],
                         activation=config["activation"], dropout=config.get("dropout", 0.0),
                         inner_activation=config.get("inner_activation"), **placement)
