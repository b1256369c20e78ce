# cython: language_level=3
"""Where a call's arrays live and which BLAS runs its GEMMs: the CUDA stream of a CUDA array, and
for CPU arrays of NumPy or torch that framework's own BLAS (sketchcore._cpu_blas finds them), the
per-framework CpuGemmProvider the core is given, looked for at each framework's first call and
kept until _reset_framework_gemm."""
from cpython.exc cimport PyErr_SetInterrupt
from libc.stdint cimport uintptr_t

from sketchcore cimport _sketchcore as core
from sketchcore._dlpack cimport torch_current_stream, torch_device

from sketchcore import _cpu_blas, _framework

import numpy

_numpy_ndarray = numpy.ndarray


# The framework BLAS of NumPy (0) and torch (1) for the CPU GEMMs (see _cpu_blas): 0 not yet
# looked for, 1 found (in framework_gemm), 2 none.
cdef int _gemm_state[2]
_gemm_state[0] = _gemm_state[1] = 0
_gemm_description = [None, None]


cdef const core.CpuGemmProvider* _framework_provider(int framework) noexcept:
    if _gemm_state[framework] == 0:
        try:
            found = (_cpu_blas.numpy_gemm if framework == 0 else _cpu_blas.torch_gemm)()
            if found is not None:
                _install_framework_gemm(framework, *found)
        except KeyboardInterrupt:
            # a noexcept function cannot raise it (Cython would print it and carry on): raise it
            # again at the interpreter's next check, and look for the BLAS at the next call
            PyErr_SetInterrupt()
            return NULL
        except Exception:  # a library that cannot be inspected: the own BLAS runs
            found = None
        if found is None:
            _gemm_state[framework] = 2
    return &core.framework_gemm(framework) if _gemm_state[framework] == 1 else NULL


def _install_framework_gemm(int framework, uintptr_t sgemm, uintptr_t dgemm, int index_bits, str description,
                            uintptr_t gomp_parallel=0):
    """Makes (sgemm, dgemm) the BLAS of the CPU GEMMs of calls on NumPy arrays (framework 0)
    or CPU torch tensors (1) until _reset_framework_gemm; used by the search, and by tests
    with instrumented entry points. `gomp_parallel`: the OpenMP runtime that BLAS runs on
    (its GOMP_parallel), for sketchcore's own loops of those calls, or 0."""
    if framework not in (0, 1) or index_bits not in (32, 64):
        raise ValueError(f"_install_framework_gemm: expected framework 0 or 1 and index_bits 32 or 64, "
                         f"got {framework} and {index_bits}")
    cdef core.CpuGemmProvider* provider = &core.framework_gemm(framework)
    provider.sgemm = <void*>sgemm
    provider.dgemm = <void*>dgemm
    provider.index_bits = index_bits
    provider.gomp_parallel = <void*>gomp_parallel
    _gemm_description[framework] = description
    _gemm_state[framework] = 1


def _reset_framework_gemm():
    """Looks for the frameworks' BLAS again at their next call (after set_cpu_blas)."""
    _gemm_state[0] = _gemm_state[1] = 0
    _gemm_description[:] = [None, None]


cdef int _framework_of(object x) except -3:
    """0 for a NumPy array, 1 for a CPU torch tensor, -1 for anything else."""
    if type(x) is _numpy_ndarray:
        return 0
    return 1 if torch_device(x) == -1 else -1


cdef object _stream_of(object x):
    """None when x is a CPU array, else the CUDA stream its framework currently uses."""
    if type(x) is _numpy_ndarray:
        return None
    cdef int device = torch_device(x)
    if device == -1:
        return None
    if device >= 0:
        return torch_current_stream(device)
    return _framework.stream_of(x)


def cpu_blas_of(x):
    """Which BLAS runs the GEMMs of a call on ``x`` (see :func:`set_cpu_blas`).

    Parameters
    ----------
    x : array
        Any array a call could receive (NumPy, torch, any DLPack producer).

    Returns
    -------
    str
        ``"numpy: ..."`` or ``"torch: ..."`` (library and entry point), ``"sketchcore: <blas>"``
        for its own BLAS, ``"cuBLASLt"`` for a CUDA array.

    Raises
    ------
    Nothing of its own: an object that is no array reads as sketchcore's own BLAS.

    Examples
    --------
    >>> import numpy as np
    >>> cpu_blas_of(np.ones(3)).split(":")[0] in ("numpy", "sketchcore")
    True
    """
    if _stream_of(x) is not None:
        return "cuBLASLt"
    cdef int framework = _framework_of(x)
    if framework >= 0 and _framework_provider(framework) != NULL:
        return ("numpy: " if framework == 0 else "torch: ") + _gemm_description[framework]
    return "sketchcore: " + core.build_info().blas.decode()
