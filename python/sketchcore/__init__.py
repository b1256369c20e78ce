"""sketchcore: sketched (randomized low-rank) linear layers.

``sketched_matmul(x, S, U)`` computes ``act(scale * sum_t (x @ S[t]) @ U[t] + bias)`` with a
C++ core on NumPy, PyTorch and any other DLPack arrays, without copying them.
"""
from __future__ import annotations

import ctypes
import os


def _load_openblas() -> None:
    """Loads the scipy-openblas32 library the extension was linked against.

    The extensions also find it through their RUNPATH; loading it here by full path makes
    the import work wherever pip put the wheel (user site, editable installs).
    """
    try:
        import scipy_openblas32
    except ImportError:  # built against another CBLAS
        return
    path = os.path.join(scipy_openblas32.get_lib_dir(), scipy_openblas32.get_library(fullname=True))
    if os.path.exists(path):
        ctypes.CDLL(path)


_load_openblas()

from sketchcore import linalg, memory, sketch  # noqa: E402
from sketchcore.layers import sklinear  # noqa: E402
from sketchcore._dlpack_buffer import DLPackBuffer  # noqa: E402
from sketchcore._cpu_blas import get_cpu_blas, set_cpu_blas  # noqa: E402
from sketchcore._cuda import get_allow_tf32, get_gemm_tuning, set_allow_tf32, set_gemm_tuning  # noqa: E402
from sketchcore._framework_gemm import cpu_blas_of  # noqa: E402
from sketchcore._gates import (  # noqa: E402
    GatedPath,
    cuda_inner_width,
    gated_path,
    gated_path_enabled,
    gated_paths,
    set_gated_path,
)
from sketchcore._int8 import Int8Factor, int8_matmul, int8_sketched_matmul, quantize_int8  # noqa: E402
from sketchcore._fp8 import Fp8Factor, e4m3_decode, e4m3_encode, fp8_sketched_matmul, quantize_e4m3  # noqa: E402
from sketchcore._ops import sketched_matmul, sketched_matmul_backward  # noqa: E402
from sketchcore._performer import performer_attention, performer_attention_backward  # noqa: E402
from sketchcore._runtime import (  # noqa: E402
    activation_names,
    build_info,
    cuda_device_count,
    get_num_threads,
    set_num_threads,
)

__version__ = build_info()["version"]

#: The activation names sketched_matmul accepts (read from the C++ core, which defines them).
ACTIVATIONS: tuple[str, ...] = activation_names()


def cmake_prefix() -> str:
    """Directory to put on ``CMAKE_PREFIX_PATH`` so that a C++ project's
    ``find_package(sketchcore CONFIG)`` finds the library inside this installed package.

    Returns
    -------
    str
        The absolute path of the installed ``sketchcore`` package, which holds the library,
        its headers and its CMake package configuration (a pip install; an editable install
        has the Python sources there and no CMake package).

    Examples
    --------
    >>> import os, sketchcore
    >>> os.path.isdir(sketchcore.cmake_prefix())
    True
    """
    return os.path.dirname(os.path.abspath(__file__))


__all__ = [
    "ACTIVATIONS",
    "DLPackBuffer",
    "GatedPath",
    "Fp8Factor",
    "Int8Factor",
    "build_info",
    "cmake_prefix",
    "cpu_blas_of",
    "cuda_device_count",
    "cuda_inner_width",
    "e4m3_decode",
    "e4m3_encode",
    "fp8_sketched_matmul",
    "gated_path",
    "gated_path_enabled",
    "gated_paths",
    "int8_matmul",
    "int8_sketched_matmul",
    "get_allow_tf32",
    "get_cpu_blas",
    "get_gemm_tuning",
    "get_num_threads",
    "linalg",
    "memory",
    "performer_attention",
    "performer_attention_backward",
    "quantize_e4m3",
    "quantize_int8",
    "sketch",
    "set_allow_tf32",
    "set_cpu_blas",
    "set_gated_path",
    "set_gemm_tuning",
    "set_num_threads",
    "sketched_matmul",
    "sketched_matmul_backward",
    "sklinear",
    "__version__",
]
