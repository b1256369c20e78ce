# cython: language_level=3
"""The fp8 (e4m3) bits of the quantized bindings: the host's e4m3 encoding and per-column e4m3
weight quantization. The factor type and the product (``Fp8Factor``, ``fp8_sketched_matmul``,
which runs on CUDA devices of compute capability 8.9 or newer only, behind the gated path
``cuda_fp8_factors``) are those of sketchcore._quantized, re-exported here."""
from libc.stdint cimport uint8_t

from sketchcore cimport _sketchcore as core

from sketchcore._quantized import Fp8Factor, _as_numpy, _column_scales, fp8_sketched_matmul

import numpy

__all__ = ["E4M3_MAX", "Fp8Factor", "e4m3_decode", "e4m3_encode", "fp8_sketched_matmul", "quantize_e4m3"]

#: The largest finite e4m3 value.
E4M3_MAX = 448.0


def e4m3_encode(values):
    """The e4m3 codes (uint8) of float32 values: round to nearest, ties to the even code,
    saturating (beyond ±448, infinities included, gives ±448); NaN gives 0x7f. The same
    encoding the CUDA kernels use (``__nv_cvt_float_to_fp8`` with ``__NV_SATFINITE``).

    Parameters
    ----------
    values : array of float32
        Any shape; NumPy, torch or another DLPack producer.

    Returns
    -------
    numpy.ndarray of uint8, values' shape

    Raises
    ------
    TypeError
        ``values`` is not a float32 array.

    Examples
    --------
    >>> import numpy as np
    >>> e4m3_encode(np.array([1.0, -448.0, 1000.0, 0.0], np.float32)).tolist()
    [56, 254, 126, 0]
    """
    va = _as_numpy(values, "e4m3_encode", "values")
    if va.dtype != numpy.float32:
        raise TypeError(f"e4m3_encode: values: expected dtype float32, got {va.dtype}")
    flat = numpy.ascontiguousarray(va).reshape(-1)
    out = numpy.empty(flat.shape, dtype=numpy.uint8)
    cdef const float[::1] src = flat
    cdef uint8_t[::1] dst = out
    cdef Py_ssize_t i
    with nogil:
        for i in range(src.shape[0]):
            dst[i] = core.float_to_e4m3(src[i])
    return out.reshape(va.shape)


def e4m3_decode(codes):
    """The float32 values of e4m3 codes (uint8, exact); NaN for 0x7f and 0xff.

    Parameters
    ----------
    codes : array of uint8

    Returns
    -------
    numpy.ndarray of float32, codes' shape

    Raises
    ------
    TypeError
        ``codes`` is not a uint8 array.

    Examples
    --------
    >>> import numpy as np
    >>> e4m3_decode(np.array([56, 254, 1], np.uint8)).tolist()
    [1.0, -448.0, 0.001953125]
    """
    ca = _as_numpy(codes, "e4m3_decode", "codes")
    if ca.dtype != numpy.uint8:
        raise TypeError(f"e4m3_decode: codes: expected dtype uint8, got {ca.dtype}")
    flat = numpy.ascontiguousarray(ca).reshape(-1)
    out = numpy.empty(flat.shape, dtype=numpy.float32)
    cdef const uint8_t[::1] src = flat
    cdef float[::1] dst = out
    cdef Py_ssize_t i
    with nogil:
        for i in range(src.shape[0]):
            dst[i] = core.e4m3_to_float(src[i])
    return out.reshape(ca.shape)


def quantize_e4m3(w):
    """Per-column e4m3 quantization of a 2-D weight: ``w ≈ e4m3_decode(codes) * scale``.

    ``scale[j] = max_i |w[i, j]| / 448`` (float32; an all-zero column gets scale 1 and zeros) and
    ``codes = e4m3_encode(w * (448 / max_i |w[i, j]|))``, computed in float32 (the form the CUDA
    kernels quantize activations in).

    Parameters
    ----------
    w : array, shape (k, n)
        Any real floating dtype (converted to float32); NumPy, torch or another DLPack producer.

    Returns
    -------
    tuple of numpy.ndarray
        ``(codes, scale)``: the e4m3 codes (uint8, shape (k, n)) and the float32 column scales
        (shape (n,)), the arguments of :class:`Fp8Factor`.

    Raises
    ------
    TypeError, ValueError
        As :func:`sketchcore.quantize_int8` (the same checks of ``w``).

    Examples
    --------
    >>> import numpy as np
    >>> codes, scale = quantize_e4m3(np.array([[1.0, 0.0], [-4.0, 0.0]], np.float32))
    >>> e4m3_decode(codes).tolist(), scale.tolist()
    ([[112.0, 0.0], [-448.0, 0.0]], [0.008928571827709675, 1.0])
    """
    w32, scale, inverse = _column_scales(w, "quantize_e4m3", E4M3_MAX)
    return e4m3_encode((w32 * inverse).astype(numpy.float32)), scale
