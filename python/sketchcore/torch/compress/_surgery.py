"""Small operations on a model's module tree used by conversion: putting a
module in place, counting parameters, finding weights used by more than one module, and
turning off fused encoder paths that would bypass converted attention."""
from __future__ import annotations

from torch import Tensor, nn

from sketchcore.torch.layers._attention import RandMultiHeadAttention


def set_module(model: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, new)


def replace(model: nn.Module, name: str, old: nn.Module, new: nn.Module) -> None:
    """Puts ``new`` in place of ``old`` at ``name``, in ``old``'s training mode (a layer created
    inside a model in eval mode must not run its dropout)."""
    new.train(old.training)
    set_module(model, name, new)


def params(layer: nn.Module) -> int:
    return sum(p.numel() for p in layer.parameters())


def parameter_names(model: nn.Module) -> dict[int, list[str]]:
    """id(tensor) → every qualified name under which the model holds it (parameters and
    buffers, duplicates included: a tied weight has several names)."""
    names: dict[int, list[str]] = {}
    for name, tensor in [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]:
        names.setdefault(id(tensor), []).append(name)
    return names


def tied_reason(weight: Tensor, own_name: str, names: dict[int, list[str]]) -> str:
    """Why a layer whose weight is ``weight`` (``own_name`` in the model) is shared with others,
    or "" when it is not."""
    others = [name for name in names.get(id(weight), []) if name != own_name]
    if not others:
        return ""
    listed = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
    return f"tied to {listed}: replacing it would untie the weights (tied='untie' converts it anyway)"


def no_fused_encoders(model: nn.Module) -> None:
    """Turns off the nested-tensor fast path of every nn.TransformerEncoder holding Performer
    attention: it runs torch's fused exact attention from the first layer's weights, bypassing it."""
    for owner in model.modules():
        if isinstance(owner, nn.TransformerEncoder) and any(isinstance(m, RandMultiHeadAttention)
                                                             for m in owner.modules()):
            owner.use_nested_tensor = False
