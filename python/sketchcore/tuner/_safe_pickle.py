"""Reading pickles (ours and Panther's) without running arbitrary code: only the tuner's classes,
sketchcore's layers, tensors and a few containers are built; Panther's classes get stand-ins."""
from __future__ import annotations

import io
import pickle
import sys
from typing import Any, BinaryIO

import torch

from sketchcore.tuner._configs import LayerConfig, TuningConfigs
from sketchcore.tuner._params import Categorical, Float, Int

_PANTHER_CONFIGS = "panther.tuner.SkAutoTuner.Configs"
#: Panther's tuner classes, by the name its pickles give them, and their sketchcore counterparts.
PANTHER_CLASSES: dict[tuple[str, str], type] = {
    (f"{_PANTHER_CONFIGS}.LayerConfig", "LayerConfig"): LayerConfig,
    (f"{_PANTHER_CONFIGS}.TuningConfigs", "TuningConfigs"): TuningConfigs,
    (f"{_PANTHER_CONFIGS}.ParamSpec", "Categorical"): Categorical,
    (f"{_PANTHER_CONFIGS}.ParamSpec", "Int"): Int,
    (f"{_PANTHER_CONFIGS}.ParamSpec", "Float"): Float,
}
_TUNER_CLASSES = (LayerConfig, TuningConfigs, Categorical, Float, Int)
_CONTAINERS = {("collections", "OrderedDict"), ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "slice"),
               ("builtins", "complex"), ("__builtin__", "set"), ("__builtin__", "frozenset"), ("_codecs", "encode")}
_TORCH = {("torch._utils", "_rebuild_tensor_v2"), ("torch._utils", "_rebuild_parameter"),
          ("torch._utils", "_rebuild_parameter_with_state"), ("torch._tensor", "_rebuild_from_type_v2"),
          ("torch.nn.parameter", "Parameter"), ("torch", "Tensor"), ("torch", "Size"), ("torch", "device")}


class PantherStub:
    """Stands in for an object of a Panther class in a Panther pickle (Panther need not be
    installed): ``panther_class`` names the class, ``state`` holds what the pickle set."""

    panther_class = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs
        self.state: Any = None

    def __setstate__(self, state: Any) -> None:
        self.state = state


_STUBS: dict[str, type] = {}


def _stub(module: str, name: str) -> type:
    qualified = f"{module}.{name}"
    if qualified not in _STUBS:
        _STUBS[qualified] = type(name, (PantherStub,), {"panther_class": qualified})
    return _STUBS[qualified]


def _load_storage(data: bytes) -> Any:
    """What pickle calls to rebuild a tensor's storage, read with torch's tensors-only loader."""
    return torch.load(io.BytesIO(data), weights_only=True)


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in PANTHER_CLASSES:
            return PANTHER_CLASSES[module, name]
        if module == "panther" or module.startswith("panther."):
            return _stub(module, name)
        if (module, name) in _CONTAINERS or (module, name) in _TORCH:
            return super().find_class(module, name)
        if (module, name) == ("torch.storage", "_load_from_bytes"):
            return _load_storage
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        if module.startswith(("sketchcore.torch.", "sketchcore.tuner.")) and module in sys.modules:
            found = getattr(sys.modules[module], name, None)  # only modules already imported: no import runs
            if isinstance(found, type) and (issubclass(found, torch.nn.Module) or found in _TUNER_CLASSES):
                return found
        raise pickle.UnpicklingError(f"the pickle refers to {module}.{name}, which is neither a tensor nor a class of "
                                     "sketchcore's or Panther's tuner and layers; it is not loaded")


def safe_load(file: BinaryIO) -> Any:
    """Unpickles ``file`` with the restricted unpickler; raises ``pickle.UnpicklingError`` for a
    global outside the allowed ones."""
    return _Unpickler(file).load()


def stub_state_dict(stub: Any, prefix: str = "") -> dict[str, torch.Tensor]:
    """The state_dict a pickled Panther module (a :class:`PantherStub`) held: its parameters and
    persistent buffers, with its submodules', by dotted name."""
    state = getattr(stub, "state", None)
    if not isinstance(state, dict):
        return {}
    out: dict[str, torch.Tensor] = {}
    for key, value in (state.get("_parameters") or {}).items():
        if isinstance(value, torch.Tensor):
            out[prefix + key] = value.detach()
    transient = state.get("_non_persistent_buffers_set") or set()
    for key, value in (state.get("_buffers") or {}).items():
        if isinstance(value, torch.Tensor) and key not in transient:
            out[prefix + key] = value
    for key, child in (state.get("_modules") or {}).items():
        out.update(stub_state_dict(child, f"{prefix}{key}."))
    return out
