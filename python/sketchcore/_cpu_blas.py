"""Which BLAS runs the CPU GEMMs of a call.

sketchcore is built with its own OpenBLAS (scipy-openblas32). NumPy and torch each bring a
BLAS too, with a thread pool whose threads spin for a while after every call; two pools on
the same cores take them from each other, and a sketched call inside a NumPy or torch
pipeline slows down (measured, with and without this rule, in docs/performance_results.md:
"Mixing with NumPy and PyTorch"). So by default (mode ``"framework"``) a call on NumPy arrays
runs its GEMMs in NumPy's own OpenBLAS and a call on CPU torch tensors in torch's BLAS (MKL in the x86 wheels, with torch's OpenMP pool): one pool per pipeline.
Found at the first call of each framework, from libraries the framework has already loaded
(never loading one); where none is found (another build of NumPy or torch, another
framework) the own BLAS runs. Mode ``"own"`` always uses sketchcore's OpenBLAS.

Consequences: the thread count of those GEMMs is the framework's (``torch.set_num_threads``,
threadpoolctl for NumPy's OpenBLAS), not :func:`sketchcore.set_num_threads` (which still
governs sketchcore's own loops and own BLAS); and results on NumPy, torch and other arrays,
equal to rounding, need not be equal bit for bit (different GEMM kernels), unless the mode is
``"own"``.
"""
from __future__ import annotations

import ctypes
import glob
import os
import sys
from typing import Literal, Optional

# (sgemm name, dgemm name, integer bits) in the order tried: reference-BLAS entry points.
_NUMPY_SYMBOLS = (("scipy_sgemm_64_", "scipy_dgemm_64_", 64), ("sgemm_64_", "dgemm_64_", 64),
                  ("scipy_sgemm_", "scipy_dgemm_", 32), ("sgemm_", "dgemm_", 32))
_TORCH_SYMBOLS = (("sgemm_", "dgemm_", 32),)  # MKL's LP64 interface, as the x86 wheels link it

Mode = Literal["framework", "own"]
_MODES = ("framework", "own")
_mode: Mode = "framework"

# (sgemm address, dgemm address, integer bits, description, GOMP_parallel address or 0)
Found = tuple[int, int, int, str, int]


def set_cpu_blas(mode: Mode) -> None:
    """``"framework"`` (default): GEMMs of calls on NumPy arrays run in NumPy's OpenBLAS and of
    calls on CPU torch tensors in torch's BLAS, where found, so that a pipeline has one thread
    pool; ``"own"``: always sketchcore's own OpenBLAS (bit-identical results across
    frameworks). Applies to calls made after it, in every thread.

    Parameters
    ----------
    mode : {"framework", "own"}

    Raises
    ------
    ValueError
        Any other ``mode``.

    Examples
    --------
    >>> import numpy as np, sketchcore
    >>> sketchcore.set_cpu_blas("own")
    >>> sketchcore.cpu_blas_of(np.ones(3)).startswith("sketchcore")
    True
    >>> sketchcore.set_cpu_blas("framework")      # the default
    """
    global _mode
    if mode not in _MODES:
        raise ValueError(f"set_cpu_blas: mode: expected one of {_MODES}, got {mode!r}")
    _mode = mode
    from sketchcore import _framework_gemm
    _framework_gemm._reset_framework_gemm()


def get_cpu_blas() -> Mode:
    """The mode set with :func:`set_cpu_blas`.

    Returns
    -------
    {"framework", "own"}

    Examples
    --------
    >>> import sketchcore
    >>> sketchcore.get_cpu_blas()
    'framework'
    """
    return _mode


def _entry_points(path: str, candidates: tuple[tuple[str, str, int], ...]) -> Optional[Found]:
    """The first pair of symbols of `candidates` in the already-loaded library at `path`."""
    try:
        library = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LOCAL)
    except (OSError, AttributeError):  # not loaded (RTLD_NOLOAD), or no RTLD_NOLOAD here
        return None
    for sgemm, dgemm, bits in candidates:
        try:
            s, d = getattr(library, sgemm), getattr(library, dgemm)
        except AttributeError:
            continue
        address = ctypes.cast(s, ctypes.c_void_p).value, ctypes.cast(d, ctypes.c_void_p).value
        if address[0] and address[1]:
            return (address[0], address[1], bits, f"{os.path.basename(path)} ({sgemm}, {'ILP64' if bits == 64 else 'LP64'})",
                    0)
    return None


def numpy_gemm() -> Optional[Found]:
    """NumPy's bundled OpenBLAS (the wheels' numpy.libs/ or numpy/.dylibs/), if loaded."""
    numpy = sys.modules.get("numpy")
    if numpy is None or _mode != "framework":
        return None
    root = os.path.dirname(os.path.abspath(str(numpy.__file__)))
    for pattern in (os.path.join(root, os.pardir, "numpy.libs", "*openblas*"), os.path.join(root, ".dylibs", "*openblas*")):
        for path in sorted(glob.glob(pattern)):
            found = _entry_points(os.path.abspath(path), _NUMPY_SYMBOLS)
            if found:
                return found
    return None


def torch_gemm() -> Optional[Found]:
    """torch's BLAS as its libtorch_cpu exports it (MKL in the x86 Linux wheels), if loaded,
    with the OpenMP runtime it runs on (see :func:`torch_openmp`)."""
    torch = sys.modules.get("torch")
    if torch is None or _mode != "framework":
        return None
    lib = os.path.join(os.path.dirname(os.path.abspath(str(torch.__file__))), "lib")
    for name in ("libtorch_cpu.so", "libtorch_cpu.dylib"):
        found = _entry_points(os.path.join(lib, name), _TORCH_SYMBOLS)
        if found:
            return found[:4] + (torch_openmp(lib),)
    return None


def torch_openmp(lib: str) -> int:
    """The address of ``GOMP_parallel`` in the OpenMP runtime torch has loaded from `lib`
    (the wheels' libgomp), or 0. sketchcore's own loops of a call on torch tensors (the
    epilogue pass) then run on the threads that ran the call's GEMMs and torch's ops, which
    spin for a while after each: on its own workers they would wait for those threads to
    release the cores (measured on 2 cores: the epilogue ran at one core's speed)."""
    for path in sorted(glob.glob(os.path.join(lib, "lib*omp*.so*"))):
        try:
            runtime = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LOCAL)
            return ctypes.cast(runtime.GOMP_parallel, ctypes.c_void_p).value or 0
        except (OSError, AttributeError):  # not loaded, or not a GNU-ABI runtime
            continue
    return 0
