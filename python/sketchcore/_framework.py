"""The caller's array framework, seen from the bindings: where outputs are allocated (in the
framework of the input, on its device), which CUDA stream the framework is using, and seed
checking. One module, so that every operation treats NumPy, torch, CuPy and other DLPack
producers alike."""
from __future__ import annotations

import secrets
import sys
from numbers import Integral
from typing import Any

_CUDA_DEVICE_TYPES = (2, 13)  # DLPack kDLCUDA, kDLCUDAManaged


def empty_like(x: Any, shape: tuple[int, ...], dtype: Any = None, dlpack_dtype: str = "float32") -> Any:
    """An uninitialised array of ``x``'s framework and device with ``shape`` and ``dtype``
    (default: ``x``'s). A DLPack producer with no framework API gets a NumPy array of
    memory sketchcore owns, of ``dlpack_dtype`` (the element type DLPack reported for x)."""
    np = sys.modules.get("numpy")
    if np is not None and type(x) is np.ndarray:
        return np.empty(shape, dtype=x.dtype if dtype is None else dtype)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return torch.empty(shape, dtype=x.dtype if dtype is None else dtype, device=x.device)
    if np is not None and isinstance(x, np.ndarray):  # ndarray subclasses
        return np.empty(shape, dtype=x.dtype if dtype is None else dtype)
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(x, cupy.ndarray):
        # The generic path below gave CuPy 14 inputs a host array (the first GPU run's CuPy
        # tests); cupy.empty under the array's device is the plain way.
        with x.device:
            return cupy.empty(shape, dtype=x.dtype if dtype is None else dtype)
    namespace = getattr(x, "__array_namespace__", None)
    if namespace is not None:  # array API standard (JAX, ...)
        return namespace().empty(shape, dtype=x.dtype if dtype is None else dtype, device=getattr(x, "device", None))
    import numpy
    from sketchcore._dlpack_buffer import DLPackBuffer
    return numpy.from_dlpack(DLPackBuffer(shape, dlpack_dtype))


def check_writable_framework(out: Any, op: str) -> None:
    """Refuses ``out=`` arrays of frameworks whose arrays are immutable (JAX): DLPack does not
    flag them read-only, and writing into one would break JAX's semantics silently."""
    jax = sys.modules.get("jax")
    if jax is not None and isinstance(out, jax.Array):
        raise TypeError(f"{op}: out: expected a mutable array (NumPy, torch, CuPy, ...), got a JAX array: JAX arrays "
                        "are immutable; omit out= and use the returned array")


def concatenate(a: Any, b: Any) -> Any:
    """[a; b] along the first axis, in the arrays' own framework."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(a, torch.Tensor):
        return torch.cat([a, b], dim=0)
    namespace = getattr(a, "__array_namespace__", None)
    if namespace is not None:
        return namespace().concat([a, b], axis=0)
    import numpy as np
    return np.concatenate([a, b], axis=0)


def is_cuda_array(obj: Any) -> bool:
    """Whether ``obj`` reports a CUDA device through ``__dlpack_device__``."""
    device = getattr(obj, "__dlpack_device__", None)
    if device is None:
        return False
    try:
        return device()[0] in _CUDA_DEVICE_TYPES
    except Exception:  # a broken producer: import_array reports it with the argument's name
        return False


def current_stream(obj: Any) -> int:
    """The CUDA stream handle that ``obj``'s framework currently uses on its device: torch's
    ``current_stream``, CuPy's ``get_current_stream``, else 0 (the legacy default stream)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        # Tensor subclasses only: the bindings read plain tensors' stream themselves, faster
        # (sketchcore._dlpack.torch_current_stream).
        return int(torch.cuda.current_stream(obj.device).cuda_stream)
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(obj, cupy.ndarray):
        with obj.device:
            return int(cupy.cuda.get_current_stream().ptr)
    return 0


def stream_of(x: Any) -> int | None:
    """None for a CPU array, else the CUDA stream a call on ``x`` runs on."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor) and not x.is_cuda:
        return None  # without torch's __dlpack_device__, a Python method: 2 µs of a 5 µs call
    if not is_cuda_array(x):
        return None
    return current_stream(x)


def checked_seed(seed: object, op: str, *, draw: bool) -> int | None:
    """``seed`` as an int in [0, 2**64); None stays None unless ``draw``, which draws a
    fresh one. Errors name the operation ``op`` and the argument."""
    if seed is None:
        return secrets.randbits(64) if draw else None
    if isinstance(seed, bool) or not isinstance(seed, Integral):
        raise TypeError(f"seed: expected an int or None, got {type(seed).__name__}")
    if not 0 <= seed < 2**64:
        raise ValueError(f"{op}: seed: expected an integer in [0, 2**64), got {seed}")
    return int(seed)
