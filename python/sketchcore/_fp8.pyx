# cython: language_level=3
"""Bindings of the fp8 (e4m3) sketched GEMM (src/cpp/include/sketchcore/fp8_matmul.hpp): the
host's e4m3 encoding, the e4m3 factor, per-column weight quantization, and the product itself,
which runs on CUDA devices of compute capability 8.9 or newer only, behind the gated path
``cuda_fp8_factors``. Arrays arrive through DLPack (no copy); the C++ core runs with the GIL
released; C++ errors come back as Python exceptions."""
from libc.stdint cimport int64_t, uint8_t

from sketchcore cimport _sketchcore as core
from sketchcore._dlpack cimport ImportedTensor, is_torch_tensor
from sketchcore._framework_gemm cimport _stream_of
from sketchcore._ops cimport _enter, _import
from sketchcore._sketchcore cimport Activation, Epilogue

from sketchcore import _framework
from sketchcore._int8 import _as_numpy

import numpy

_ACTIVATION_CODES = {core.activation_name(a).decode(): <int>a for a in core.all_activations()}

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


cdef class Fp8Factor:
    """A (k, n) matrix of e4m3 codes with one float32 scale per column, for
    :func:`fp8_sketched_matmul`.

    The factor's value is ``e4m3_decode(codes)[i, j] * scale[j]``. Construction copies the codes
    into the layout cuBLASLt's fp8 GEMM reads (columns contiguous, padded to multiples of 16);
    the factor is copied to a CUDA device on its first call there. Immutable; may be shared by
    threads. The factor can be built on any machine (only the product needs a GPU).
    ``shape`` is ``(k, n)``; ``nbytes``, ``codes`` and ``scale`` are described below.

    Parameters
    ----------
    codes : array of uint8, shape (k, n)
        e4m3 codes, not the NaN codes 0x7f and 0xff. NumPy, a torch tensor or any DLPack
        producer; any strides (a CUDA array is copied to the host).
    scale : array of float32, shape (n,)
        Finite, non-negative column scales.

    Raises
    ------
    TypeError
        ``codes`` not uint8, ``scale`` not float32, or not arrays.
    ValueError
        ``codes`` not 2-D, ``scale`` not of shape (n,), a NaN code, a negative or non-finite scale.

    Examples
    --------
    >>> import numpy as np
    >>> f = Fp8Factor(*quantize_e4m3(np.array([[1.0, -2.0], [3.0, 0.5]], np.float32)))
    >>> f.shape, f.scale.tolist()
    ((2, 2), [0.0066964286379516125, 0.004464285913854837])
    """
    cdef core.Fp8Factor* factor

    def __cinit__(self, codes, scale):
        self.factor = NULL
        ca = _as_numpy(codes, "Fp8Factor", "codes")
        sa = _as_numpy(scale, "Fp8Factor", "scale")
        if ca.dtype != numpy.uint8:
            raise TypeError(f"Fp8Factor: codes: expected dtype uint8 (e4m3 codes), got {ca.dtype}")
        if ca.ndim != 2:
            raise ValueError(f"Fp8Factor: codes: expected a 2-D array (k, n), got shape {ca.shape}")
        if sa.dtype != numpy.float32:
            raise TypeError(f"Fp8Factor: scale: expected dtype float32, got {sa.dtype}")
        if sa.shape != (ca.shape[1],):
            raise ValueError(f"Fp8Factor: scale: expected shape ({ca.shape[1]},) (one per column of codes), "
                             f"got {sa.shape}")
        sa = numpy.ascontiguousarray(sa)
        cdef const uint8_t[:, :] cv = ca
        cdef const float[::1] sv = sa
        cdef int64_t rows = ca.shape[0], cols = ca.shape[1]
        cdef int64_t row_stride = ca.strides[0], col_stride = ca.strides[1]
        cdef const uint8_t* cp = &cv[0, 0] if rows > 0 and cols > 0 else NULL
        cdef const float* sp = &sv[0] if cols > 0 else NULL
        with nogil:
            self.factor = new core.Fp8Factor(cp, rows, cols, row_stride, col_stride, sp)

    def __dealloc__(self):
        del self.factor

    @property
    def shape(self):
        """(k, n)."""
        return (self.factor.rows(), self.factor.cols())

    @property
    def nbytes(self):
        """Bytes held on the host: the codes and scales, padded to multiples of 16."""
        return self.factor.nbytes()

    @property
    def codes(self):
        """A NumPy copy of the e4m3 codes, uint8, shape (k, n)."""
        out = numpy.empty((self.factor.rows(), self.factor.cols()), dtype=numpy.uint8)
        cdef uint8_t[:, ::1] ov = out
        if out.size:
            self.factor.unpack(&ov[0, 0])
        return out

    @property
    def scale(self):
        """A NumPy copy of the column scales, shape (n,)."""
        out = numpy.empty((self.factor.cols(),), dtype=numpy.float32)
        cdef float[::1] ov = out
        cdef const float* src = self.factor.scales()
        cdef int64_t j
        for j in range(self.factor.cols()):
            ov[j] = src[j]
        return out

    def __repr__(self):
        return f"Fp8Factor(shape={self.shape}, nbytes={self.nbytes})"


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
        ``(codes, scale)``: uint8 (k, n) and float32 (n,), ready for :class:`Fp8Factor`.

    Raises
    ------
    TypeError
        ``w`` not an array of a real floating dtype.
    ValueError
        ``w`` not 2-D, or with a non-finite value.

    Examples
    --------
    >>> import numpy as np
    >>> codes, scale = quantize_e4m3(np.array([[1.0, 0.0], [-4.0, 0.0]], np.float32))
    >>> e4m3_decode(codes).tolist(), scale.tolist()
    ([[112.0, 0.0], [-448.0, 0.0]], [0.008928571827709675, 1.0])
    """
    wa = _as_numpy(w, "quantize_e4m3", "w")
    if wa.dtype.kind != "f":
        raise TypeError(f"quantize_e4m3: w: expected a floating dtype, got {wa.dtype}")
    if wa.ndim != 2:
        raise ValueError(f"quantize_e4m3: w: expected a 2-D array (k, n), got shape {wa.shape}")
    w32 = wa.astype(numpy.float32)
    if not numpy.isfinite(w32).all():
        raise ValueError("quantize_e4m3: w: expected finite values, got a NaN or infinity (in float32)")
    max_abs = numpy.abs(w32).max(axis=0) if w32.shape[0] else numpy.zeros(w32.shape[1], numpy.float32)
    zero = max_abs == 0
    scale = (max_abs / numpy.float32(E4M3_MAX)).astype(numpy.float32)
    scale[zero] = 1.0
    inverse = numpy.where(zero, numpy.float32(0), numpy.float32(E4M3_MAX) / numpy.where(zero, 1, max_abs))
    return e4m3_encode((w32 * inverse.astype(numpy.float32)).astype(numpy.float32)), scale


def _activation(value, str name):
    if value is None:
        value = "none"
    if not isinstance(value, str):
        raise TypeError(f"fp8_sketched_matmul: {name}: expected a str such as 'relu' or None, "
                        f"got {type(value).__name__}")
    code = _ACTIVATION_CODES.get(value)
    if code is None:
        raise ValueError(f"fp8_sketched_matmul: {name}: expected one of {tuple(_ACTIVATION_CODES)}, got {value!r}")
    return code


cdef Fp8Factor _factor(obj, str name):
    if not isinstance(obj, Fp8Factor):
        raise TypeError(f"fp8_sketched_matmul: {name}: expected an Fp8Factor, got {type(obj).__name__}")
    return <Fp8Factor>obj


def fp8_sketched_matmul(x, S, U, *, bias=None, activation="none", inner_activation=None, out=None):
    """The sketched GEMM with e4m3 factors and activations quantized per row to e4m3, on a CUDA
    device of compute capability 8.9 or newer (Ada, Hopper).

    Computes ``act(deq(f8(σ(deq(f8(x) @ S))) @ U) + bias)``, where ``f8`` quantizes each row
    (row scale ``max|row| / 448``, codes ``e4m3_encode(row * (448 / max|row|))`` in float32; an
    all-zero row gives zeros), the products are cuBLASLt fp8 GEMMs with float32 accumulation,
    and ``deq`` multiplies by the row scale times the factor's column scale. σ is
    ``inner_activation``. There is no CPU kernel. The CUDA path has not yet run on a GPU: it
    needs the gated path ``cuda_fp8_factors`` open (see :func:`sketchcore.gated_paths`).

    Parameters
    ----------
    x : array of float32, shape (..., d_in)
        A CUDA array (torch CUDA tensor, CuPy; ``bias`` and ``out`` on the same device); the call
        runs on the framework's current stream, the factors copied to the device on their first
        call there.
    S : Fp8Factor, shape (d_in, r)
    U : Fp8Factor, shape (r, d_out)
    bias : array of float32, shape (d_out,), optional
    activation, inner_activation : {"none", "relu", "gelu", "gelu_tanh", "silu"}, optional
        The output activation and σ; ``None`` means ``"none"``.
    out : array of float32, shape (..., d_out), optional
        Written in place and returned: writable, unit last stride, leading dimensions that
        collapse, no overlap with ``x`` or ``bias``.

    Returns
    -------
    array
        ``out`` if given, else a new float32 array of ``x``'s framework, shape
        ``x.shape[:-1] + (d_out,)``.

    Raises
    ------
    TypeError
        ``S``/``U`` not Fp8Factor, ``x``/``bias``/``out`` not float32 arrays, ``bias``/``out``
        not on ``x``'s device, ``x`` not on a CUDA device (the message says one of compute
        capability 8.9 or newer is needed), a build without the CUDA backend, or a device of
        compute capability below 8.9 (checked once the gate is open).
    ValueError
        Extents that do not chain, a wrong bias or out, an unknown activation.
    RuntimeError
        The gated path ``cuda_fp8_factors`` is closed (the message names it and how to open it),
        or a CUDA failure.
    """
    cdef Fp8Factor s = _factor(S, "S"), u = _factor(U, "U")
    cdef Epilogue epilogue
    epilogue.activation = <Activation><int>_activation(activation, "activation")
    epilogue.inner_activation = <Activation><int>_activation(inner_activation, "inner_activation")
    if is_torch_tensor(x) and x.requires_grad:
        x = x.detach()  # inference only: the fp8 product has no backward
    stream = _stream_of(x)
    cdef ImportedTensor xt = _import(x, "x", False, stream)
    cdef ImportedTensor bt
    if bias is not None:
        if is_torch_tensor(bias) and bias.requires_grad:
            bias = bias.detach()
        bt = _import(bias, "bias", False, stream)
        epilogue.bias = bt.view
    shape = tuple(core.fp8_sketched_matmul_output_shape(xt.view, s.factor[0], u.factor[0]))
    cdef ImportedTensor ot
    if out is None:
        out = x.new_empty(shape) if is_torch_tensor(x) else _framework.empty_like(x, shape, dlpack_dtype="float32")
    ot = _import(out, "out", True, stream)
    if ot.read_only:
        raise ValueError("fp8_sketched_matmul: out: expected a writable array, got a read-only one")
    if ot.is_copy:
        raise ValueError("fp8_sketched_matmul: out: expected the array's own memory, "
                         "got a copy made by its DLPack producer")
    _enter(x, stream)  # the call's CUDA stream, or for a CPU call no stream left from an earlier one
    with nogil:
        core.fp8_sketched_matmul(xt.view, s.factor[0], u.factor[0], ot.view, epilogue)
    return out
