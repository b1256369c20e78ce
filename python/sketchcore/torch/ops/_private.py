"""The one place where sketchcore uses private PyTorch APIs (``torch._C``), guarded: if a
torch release renames them, autocast support is skipped with a warning and everything else
keeps working.

Why private APIs at all: ``torch.library.register_autocast`` fixes one dtype at registration,
but the operators should follow the autocast region's dtype (float16 or bfloat16, on the CPU
and on CUDA), as torch's own matmuls do; that needs a kernel on the Autocast key that
re-dispatches below it.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable, Optional

import torch

_LIBRARY = torch.library.Library("sketchcore", "IMPL")


_AUTOCAST_KEYS = {"cpu": "AutocastCPU", "cuda": "AutocastCUDA"}


def register_autocast(name: str, device_type: str,
                      plan: Callable[[tuple[Any, ...], str, torch.dtype],
                                     tuple[tuple[Any, ...], Optional[torch.dtype]]]) -> bool:
    """Registers an Autocast kernel of ``device_type`` ("cpu" or "cuda") for
    ``sketchcore::name`` that casts its arguments as ``plan(args, device_type, region_dtype)``
    says, calls the operator below autocast and casts the operator's first output to the dtype
    the plan names (if any). Returns False (after a warning) when this torch lacks the private
    APIs it needs."""
    key_name = _AUTOCAST_KEYS[device_type]
    try:
        key = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, key_name))
        exclude = torch._C._ExcludeDispatchKeyGuard
    except AttributeError as e:  # pragma: no cover - depends on the torch release
        warnings.warn(f"sketchcore: {device_type} autocast for sketchcore::{name} is unavailable with torch "
                      f"{torch.__version__} ({e}); the operator runs in its inputs' dtype", RuntimeWarning,
                      stacklevel=2)
        return False
    overload = getattr(torch.ops.sketchcore, name).default

    def kernel(_keyset: Any, *args: Any) -> Any:
        with exclude(key):
            cast, out_dtype = plan(args, device_type, torch.get_autocast_dtype(device_type))
            result = overload(*cast)
        return result if out_dtype is None else (result[0].to(out_dtype), *result[1:])

    _LIBRARY.impl(name, kernel, key_name, with_keyset=True)
    return True


def _never() -> bool:
    return False


#: Whether a torch.func transform (grad, vjp, jacrev, vmap, ...) is active (always False when
#: this torch cannot tell); torch's own function, looked up once (it is on every eager call).
functorch_active: Callable[[], bool] = getattr(torch._C, "_are_functorch_transforms_active", _never)
