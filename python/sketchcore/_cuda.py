"""Host-side helpers of the CUDA path: which stream a CUDA array's framework is using, and
finding cuBLASLt (the native library loads it at run time, see src/cuda/cublaslt_api.hpp)."""
from __future__ import annotations

import ctypes
import importlib.util
import os
import sys

_CUDA_DEVICE_TYPES = (2, 13)  # DLPack kDLCUDA, kDLCUDAManaged

_allow_tf32 = False
_cublaslt_searched = False


def is_cuda_array(obj) -> bool:
    """Whether ``obj`` reports a CUDA device through ``__dlpack_device__``."""
    device = getattr(obj, "__dlpack_device__", None)
    if device is None:
        return False
    try:
        return device()[0] in _CUDA_DEVICE_TYPES
    except Exception:  # a broken producer: import_array reports it with the argument's name
        return False


def current_stream(obj) -> int:
    """The CUDA stream handle that ``obj``'s framework currently uses on its device: torch's
    ``current_stream``, CuPy's ``get_current_stream``, else 0 (the legacy default stream)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return int(torch.cuda.current_stream(obj.device).cuda_stream)
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(obj, cupy.ndarray):
        with obj.device:
            return int(cupy.cuda.get_current_stream().ptr)
    return 0


def dlpack_stream(stream: int) -> int:
    """The stream argument of ``__dlpack__`` for ``stream``: DLPack writes the legacy
    default stream as 1 (0 is reserved)."""
    return stream if stream != 0 else 1


def set_allow_tf32(allow: bool) -> None:
    """Lets float32 GEMMs on CUDA devices use TF32 tensor cores (off by default, so float32
    results are exact to float32 GEMMs). Applies to calls made after it, in every thread."""
    global _allow_tf32
    if not isinstance(allow, bool):
        raise TypeError(f"set_allow_tf32: allow: expected a bool, got {type(allow).__name__}")
    _allow_tf32 = allow


def get_allow_tf32() -> bool:
    """Whether float32 GEMMs on CUDA devices may use TF32."""
    return _allow_tf32


def preload_cublaslt() -> None:
    """Loads cuBLASLt from the ``nvidia-cublas`` wheel (CUDA 13: ``nvidia/cu13/lib``;
    CUDA 12's ``nvidia-cublas-cu12``: ``nvidia/cublas/lib``) when one is installed, so that
    the native library's dlopen finds it. Without the wheel the dynamic loader's search
    applies (a toolkit on LD_LIBRARY_PATH, or a copy torch or CuPy loaded already)."""
    global _cublaslt_searched
    if _cublaslt_searched:
        return
    _cublaslt_searched = True
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return
    for root in spec.submodule_search_locations:
        for relative in (("cu13", "lib", "libcublasLt.so.13"), ("cublas", "lib", "libcublasLt.so.12")):
            path = os.path.join(root, *relative)
            if os.path.exists(path):
                try:
                    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                    return
                except OSError:
                    continue
