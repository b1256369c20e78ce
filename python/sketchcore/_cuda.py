"""Host-side settings of the CUDA path: TF32, GEMM tuning, and finding cuBLASLt (the native
library loads it at run time, see src/cuda/cublaslt_api.hpp). Streams: see _framework."""
from __future__ import annotations

import os

from sketchcore import _cublaslt

_allow_tf32 = False
_tune_gemms = os.environ.get("SKETCHCORE_TUNE_GEMMS", "0") not in ("", "0")
_cublaslt_searched = False


def _checked_bool(value: object, where: str, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{where}: {name}: expected a bool, got {type(value).__name__}")
    return value


def set_allow_tf32(allow: bool) -> None:
    """Lets float32 GEMMs on CUDA devices use TF32 tensor cores (off by default, so float32
    results are exact to float32 GEMMs). Applies to calls made after it, in every thread.

    Parameters
    ----------
    allow : bool

    Raises
    ------
    TypeError
        ``allow`` is not a bool.

    Examples
    --------
    >>> import sketchcore
    >>> sketchcore.set_allow_tf32(True)
    >>> sketchcore.get_allow_tf32()
    True
    >>> sketchcore.set_allow_tf32(False)           # the default
    """
    global _allow_tf32
    _allow_tf32 = _checked_bool(allow, "set_allow_tf32", "allow")


def get_allow_tf32() -> bool:
    """Whether float32 GEMMs on CUDA devices may use TF32.

    Returns
    -------
    bool

    Examples
    --------
    >>> import sketchcore
    >>> sketchcore.get_allow_tf32()
    False
    """
    return _allow_tf32


def set_gemm_tuning(tune: bool) -> None:
    """Times cuBLASLt's candidate algorithms (up to 8) for each CUDA GEMM shape at its first
    call, synchronising the stream once per candidate, and keeps the fastest for the rest of
    the process. Off by default (or set ``SKETCHCORE_TUNE_GEMMS=1``): the heuristic's choice is
    reproducible, while a timed choice may differ between processes and with it the last bits
    of the results. GEMMs inside a CUDA graph capture use the heuristic's choice. Applies to
    calls made after it, in every thread.

    Parameters
    ----------
    tune : bool

    Raises
    ------
    TypeError
        ``tune`` is not a bool.

    Examples
    --------
    >>> import sketchcore
    >>> before = sketchcore.get_gemm_tuning()
    >>> sketchcore.set_gemm_tuning(True)
    >>> sketchcore.get_gemm_tuning()
    True
    >>> sketchcore.set_gemm_tuning(before)
    """
    global _tune_gemms
    _tune_gemms = _checked_bool(tune, "set_gemm_tuning", "tune")


def get_gemm_tuning() -> bool:
    """Whether CUDA GEMM shapes are timed and tuned at their first call (see set_gemm_tuning).

    Returns
    -------
    bool
        ``False`` unless :func:`set_gemm_tuning` or ``SKETCHCORE_TUNE_GEMMS=1`` turned it on.

    Examples
    --------
    >>> import sketchcore
    >>> isinstance(sketchcore.get_gemm_tuning(), bool)
    True
    """
    return _tune_gemms


def cuda_major() -> int:
    """The CUDA major version the native library was built with (0 for a CPU-only build)."""
    from sketchcore._runtime import build_info
    return int(build_info()["cuda_runtime_version"]) // 1000


def _device_count() -> int:
    from sketchcore._runtime import cuda_device_count
    return cuda_device_count()


def preload_cublaslt() -> None:
    """Finds and loads cuBLASLt before the first CUDA call (search order: _cublaslt), so that
    the native library's dlopen by soname finds that copy; afterwards a flag test.

    Without the CUDA backend or without a device nothing is searched: the core's call raises its
    own error (which names the device), the more useful one there.

    Raises
    ------
    RuntimeError
        None was found; the message names the pip package to install.
    """
    global _cublaslt_searched
    if _cublaslt_searched:
        return
    major = cuda_major()
    if not major or _device_count() == 0:
        return
    _cublaslt.ensure_loaded(major)
    _cublaslt_searched = True
