# cython: language_level=3
"""The int8 bits of the quantized bindings: per-column int8 weight quantization, the choice of the
CPU's int8 kernel family (src/cpp/include/sketchcore/int8_matmul.hpp) and the GEMM benchmark hook.
The factor type and the products (``Int8Factor``, ``int8_sketched_matmul``, ``int8_matmul``) are
those of sketchcore._quantized, re-exported here."""
from libc.stdint cimport int64_t
from libcpp.string cimport string
from libcpp.vector cimport vector

from sketchcore cimport _sketchcore as core
from sketchcore._quantized cimport QuantizedFactor

from sketchcore._quantized import Int8Factor, _as_numpy, _column_scales, int8_matmul, int8_sketched_matmul

import numpy

__all__ = ["Int8Factor", "int8_gemm_isa", "int8_gemm_isa_supported", "int8_matmul", "int8_peak_macs_per_second",
           "int8_sketched_matmul", "quantize_int8", "set_int8_gemm_isa"]


def quantize_int8(w):
    """Symmetric per-column int8 quantization of a 2-D weight: ``w ≈ q * scale``.

    ``scale[j] = max_i |w[i, j]| / 127`` (float32; an all-zero column gets scale 1 and zeros) and
    ``q = clip(round_half_even(w / scale), -127, 127)`` (int8), computed in float32.

    Parameters
    ----------
    w : array, shape (k, n)
        Any real floating dtype (converted to float32); NumPy, torch or another DLPack producer
        (CUDA arrays of torch or CuPy are copied to the host).

    Returns
    -------
    tuple of numpy.ndarray
        ``(q, scale)``: int8 (k, n) and float32 (n,), ready for :class:`Int8Factor`.

    Raises
    ------
    TypeError
        ``w`` not an array of a real floating dtype.
    ValueError
        ``w`` not 2-D, or with a non-finite value.

    Examples
    --------
    >>> import numpy as np
    >>> q, scale = quantize_int8(np.array([[1.0, 0.0], [-4.0, 0.0]], dtype=np.float32))
    >>> q.tolist(), scale[1], scale.dtype
    ([[32, 0], [-127, 0]], np.float32(1.0), dtype('float32'))
    """
    w32, scale, inverse = _column_scales(w, "quantize_int8", 127.0)
    q = numpy.clip(numpy.rint(w32 / scale), -127, 127).astype(numpy.int8)
    return q, scale


def int8_gemm_isa():
    """The int8 kernel family this process runs: "amx", "avx512_vnni", "avx_vnni", "avx2" or "portable"."""
    return core.int8_gemm_isa().decode()


def set_int8_gemm_isa(str name):
    """Selects the int8 kernel family (for tests and benchmarks); ValueError if this CPU lacks it."""
    core.set_int8_gemm_isa(name.encode())


def int8_gemm_isa_supported(str name):
    """Whether this CPU runs the int8 kernel family ``name``."""
    return core.int8_gemm_isa_supported(name.encode())


def int8_peak_macs_per_second(str name, int64_t iterations=10_000_000):
    """Single-thread int8 multiply-adds per second of a register-only loop of the family
    ``name``: TDPBUSD on tiles ("amx", 4 per iteration), VPDPBUSD on vectors ("avx512_vnni",
    24 per iteration; "avx_vnni", 12); 0 for the others. The peak the int8 GEMM is measured
    against."""
    cdef string n = name.encode()
    cdef double result
    with nogil:
        result = core.int8_peak_macs_per_second(n, iterations)
    return result


def _gemm_for_bench(x, factor, int64_t repeats=1):
    """Benchmark hook, private: the CPU int8 GEMM alone (one product of int8_sketched_matmul).
    ``x`` (rows × factor rows, float32 numpy) is quantized once, untimed; then the GEMM with its
    int32 → float32 dequantization runs ``repeats`` times. Returns (the float32 product, rows ×
    factor columns; the wall-clock seconds of each run)."""
    if not isinstance(factor, Int8Factor):
        raise TypeError(f"_gemm_for_bench: factor: expected an Int8Factor, got {type(factor).__name__}")
    cdef QuantizedFactor f = <QuantizedFactor>factor
    xa = numpy.ascontiguousarray(x, dtype=numpy.float32)
    if xa.ndim != 2 or xa.shape[1] != f.factor.rows():
        raise ValueError(f"_gemm_for_bench: x: expected shape (rows, {f.factor.rows()}), got {xa.shape}")
    cdef int64_t rows = xa.shape[0], cols = f.factor.cols()
    out = numpy.empty((rows, cols), dtype=numpy.float32)
    cdef const float[:, ::1] xv = xa
    cdef float[:, ::1] ov = out
    cdef const float* xp = &xv[0, 0] if xa.size > 0 else NULL
    cdef float* op = &ov[0, 0] if out.size > 0 else NULL
    cdef vector[double] seconds
    with nogil:
        seconds = core.int8_gemm_seconds_for_bench(xp, rows, (<core.Int8Factor*>f.factor)[0], op, repeats)
    return out, list(seconds)
