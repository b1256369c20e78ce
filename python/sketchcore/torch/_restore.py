"""``restore_model``: rebuilding a compressed model from its state_dict and its dense
architecture, without the dense weights or a new conversion."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from sketchcore.torch._attention import RandMultiHeadAttention
from sketchcore.torch._conv import SKConv2d
from sketchcore.torch._lowrank import LowRankLinear
from sketchcore.torch._modules import SKLinear
from sketchcore.torch._surgery import no_fused_encoders, set_module

_LAYERS = {"SKLinear": SKLinear, "LowRankLinear": LowRankLinear, "SKConv2d": SKConv2d,
           "RandMultiHeadAttention": RandMultiHeadAttention}


def restore_model(model: nn.Module, state_dict: Mapping[str, Any], *, strict: bool = True) -> nn.Module:
    """Loads a compressed model's ``state_dict`` into ``model`` built with its original (dense)
    architecture: every layer the state_dict records as a sketchcore layer (its
    ``_extra_state``) is first replaced by an empty one of the saved configuration, then the
    whole state_dict is loaded. No dense weight or conversion is needed. Returns ``model``."""
    for key, value in state_dict.items():
        if not key.endswith("._extra_state") or not isinstance(value, dict) or value.get("sketchcore") not in _LAYERS:
            continue
        name = key[: -len("._extra_state")]
        config = dict(value)
        cls = _LAYERS[config.pop("sketchcore")]
        config.pop("dropout", None) if cls is LowRankLinear else None
        old = model.get_submodule(name)
        reference = next(iter(old.parameters()), None) if isinstance(old, nn.Module) else None
        placement = {} if reference is None else {"dtype": reference.dtype, "device": reference.device}
        if cls is RandMultiHeadAttention:
            attention = RandMultiHeadAttention(config["embed_dim"], config["num_heads"], config["num_random_features"],
                                               config["dropout"], config["bias"], config["kernel_fn"],
                                               config["iscausal"], seed=config["seed"], **placement)
            attention.batch_first = config.get("batch_first", True)
            set_module(model, name, attention)
            continue
        if cls is SKConv2d:
            new: nn.Module = SKConv2d(config["in_channels"], config["out_channels"], tuple(config["kernel_size"]),
                                      tuple(config["stride"]), tuple(config["padding"]), config["bias"],
                                      config["num_terms"], config["low_rank"], dilation=tuple(config["dilation"]),
                                      **placement)
        elif cls is SKLinear:
            new = SKLinear(config["in_features"], config["out_features"], config["num_terms"], config["low_rank"],
                           bias=config["bias"], activation=config["activation"], dropout=config["dropout"],
                           **placement)
        else:
            new = LowRankLinear(config["in_features"], config["out_features"], config["rank"], bias=config["bias"],
                                activation=config["activation"], **placement)
        set_module(model, name, new)
    no_fused_encoders(model)
    model.load_state_dict(state_dict, strict=strict)
    return model
