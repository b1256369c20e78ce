"""Which module types ``sketch_model`` treats as linear maps, and how to read their weights.

Built in: ``nn.Linear`` (weight stored (out, in)) and ``transformers``' ``Conv1D`` (GPT-2's
projections, weight stored (in, out)). ``Conv1D`` is registered by its qualified name, so
``transformers`` is never imported here: a model that uses it has imported it already.
:func:`register_linear` adds other module types whose forward is ``x ↦ x Wᵀ + b``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional, Union

import torch
from torch import nn

Orientation = Literal["out_in", "in_out"]


@dataclass(frozen=True)
class LinearSpec:
    """Where a registered module keeps its weight and bias, and how its weight is laid out."""

    weight: str
    bias: Optional[str]
    orientation: Orientation  #: "out_in": (out, in) as nn.Linear; "in_out": (in, out) as Conv1D


#: Registered classes, and classes known by "module.QualName" (matched without importing them).
_BY_CLASS: dict[type, LinearSpec] = {nn.Linear: LinearSpec("weight", "bias", "out_in")}
_BY_NAME: dict[str, LinearSpec] = {"transformers.pytorch_utils.Conv1D": LinearSpec("weight", "bias", "in_out")}


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def register_linear(cls: Union[type[nn.Module], str], *, weight: str = "weight", bias: Optional[str] = "bias",
                    orientation: Orientation = "out_in") -> None:
    """Lets :func:`sketch_model` convert modules of type ``cls`` (exactly that type, not its
    subclasses) as linear maps ``y = x Wᵀ + b``.

    ``weight`` and ``bias`` name the module's attributes holding W and b (``bias=None``: the
    type has none; an attribute that is None on an instance means no bias there);
    ``orientation`` says how W is stored: ``"out_in"`` (out_features, in_features), as
    ``nn.Linear``, or ``"in_out"``, as ``transformers``' ``Conv1D``. ``cls`` may be the class
    or its qualified name ``"package.module.ClassName"`` (then the package is not imported).
    Registering a type again replaces its entry. The module's forward must compute exactly
    ``x @ W_(in,out) + b`` on the last dimension of its first argument (calibration and the
    replacement both rely on it).

    Parameters
    ----------
    cls : type or str
        A subclass of ``nn.Module``, or its qualified name.
    weight : str
        Attribute holding W.
    bias : str or None
        Attribute holding b; None when the type has no bias.
    orientation : {"out_in", "in_out"}

    Returns
    -------
    None

    Raises
    ------
    TypeError
        ``cls`` is neither a subclass of ``nn.Module`` nor a string.
    ValueError
        A name without a dot; ``weight`` or ``bias`` not an identifier; an unknown
        ``orientation``.

    Examples
    --------
    >>> class Dense(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.w = nn.Parameter(torch.randn(16, 32))  # stored (in, out)
    ...     def forward(self, x):
    ...         return x @ self.w
    >>> register_linear(Dense, weight="w", bias=None, orientation="in_out")
    >>> from sketchcore.torch import sketch_model
    >>> model = nn.Sequential(Dense())
    >>> report = sketch_model(model, low_rank=4)
    >>> type(model[0]).__name__
    'LowRankLinear'
    >>> register_linear(Dense, orientation="row_major")
    Traceback (most recent call last):
    ValueError: register_linear: orientation: expected 'out_in' ... got 'row_major'
    """
    if isinstance(cls, str):
        if "." not in cls:
            raise ValueError(f"register_linear: cls: expected a class or a qualified name 'package.module.Class', "
                             f"got {cls!r}")
    elif not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise TypeError(f"register_linear: cls: expected a subclass of torch.nn.Module or its qualified name, "
                        f"got {cls!r}")
    if not isinstance(weight, str) or not weight.isidentifier():
        raise ValueError(f"register_linear: weight: expected an attribute name, got {weight!r}")
    if bias is not None and (not isinstance(bias, str) or not bias.isidentifier()):
        raise ValueError(f"register_linear: bias: expected an attribute name or None, got {bias!r}")
    if orientation not in ("out_in", "in_out"):
        raise ValueError(f"register_linear: orientation: expected 'out_in' (stored as nn.Linear's weight) or "
                         f"'in_out' (as transformers' Conv1D), got {orientation!r}")
    spec = LinearSpec(weight, bias, orientation)
    if isinstance(cls, str):
        _BY_NAME[cls] = spec
    else:
        _BY_CLASS[cls] = spec


def spec_of(module: nn.Module) -> Optional[LinearSpec]:
    """The registration of ``module``'s exact type, or None."""
    cls = type(module)
    spec = _BY_CLASS.get(cls)
    return spec if spec is not None else _BY_NAME.get(_qualified(cls))


def unregistered_subclass(module: nn.Module) -> Optional[str]:
    """Why a module that looks linear is left alone: it subclasses a registered type without
    being registered itself (its owner may read the weight directly, or its forward may differ)."""
    for base in type(module).__mro__[1:]:
        if base in _BY_CLASS or _qualified(base) in _BY_NAME:
            return (f"{type(module).__name__} is a subclass of {base.__name__}, not replaced (its owner may read "
                    f"its weight directly; register_linear({type(module).__name__}) if its forward is the plain "
                    "linear map)")
    return None


def read_linear(module: nn.Module, spec: LinearSpec) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """M (in × out, the factored orientation, a view of the weight) and the bias (or None).
    Raises ValueError naming the module type when the attributes do not hold a matrix and a
    matching vector."""
    where = f"{type(module).__name__}.{spec.weight}"
    W = getattr(module, spec.weight, None)
    if not isinstance(W, torch.Tensor) or W.dim() != 2:
        shape = tuple(W.shape) if isinstance(W, torch.Tensor) else type(W).__name__
        raise ValueError(f"{where}: expected a 2-D weight matrix, got {shape}")
    M = W.detach().t() if spec.orientation == "out_in" else W.detach()
    b = getattr(module, spec.bias, None) if spec.bias is not None else None
    if b is not None and (not isinstance(b, torch.Tensor) or tuple(b.shape) != (M.shape[1],)):
        shape = tuple(b.shape) if isinstance(b, torch.Tensor) else type(b).__name__
        raise ValueError(f"{type(module).__name__}.{spec.bias}: expected a bias of shape ({M.shape[1]},), got {shape}")
    return M, b


def weight_parameter(module: nn.Module, spec: LinearSpec) -> Optional[torch.Tensor]:
    """The weight tensor itself (to find other modules sharing it)."""
    W = getattr(module, spec.weight, None)
    return W if isinstance(W, torch.Tensor) else None
