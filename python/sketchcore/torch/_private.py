"""The one place where sketchcore uses private PyTorch APIs (``torch._C``), guarded: if a
torch release renames them, CUDA autocast support is skipped with a warning and everything
else keeps working.

Why private APIs at all: ``torch.library.register_autocast`` fixes one dtype at registration,
but on CUDA the operators should follow the autocast region's dtype (float16 or bfloat16), as
torch's own matmuls do; that needs a kernel on the AutocastCUDA key that re-dispatches below it.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable

import torch

_LIBRARY = torch.library.Library("sketchcore", "IMPL")


def register_cuda_autocast(name: str, cast_args: Callable[[tuple[Any, ...], str, torch.dtype], tuple[Any, ...]]) -> bool:
    """Registers an AutocastCUDA kernel for ``sketchcore::name`` that casts its arguments with
    ``cast_args(args, "cuda", region_dtype)`` and calls the operator below autocast. Returns
    False (after a warning) when this torch lacks the private APIs it needs."""
    try:
        key = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCUDA)
        exclude = torch._C._ExcludeDispatchKeyGuard
    except AttributeError as e:  # pragma: no cover - depends on the torch release
        warnings.warn(f"sketchcore: CUDA autocast for sketchcore::{name} is unavailable with torch "
                      f"{torch.__version__} ({e}); the operator runs in its inputs' dtype", RuntimeWarning,
                      stacklevel=2)
        return False
    overload = getattr(torch.ops.sketchcore, name).default

    def kernel(_keyset: Any, *args: Any) -> Any:
        with exclude(key):
            return overload(*cast_args(args, "cuda", torch.get_autocast_dtype("cuda")))

    _LIBRARY.impl(name, kernel, "AutocastCUDA", with_keyset=True)
    return True
