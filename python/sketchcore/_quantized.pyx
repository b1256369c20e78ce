# cython: language_level=3
"""Bindings of the quantized factors and GEMMs of every format (src/cpp/include/sketchcore/quantized.hpp):
one factor type over a table of formats (``Int8Factor`` and ``Fp8Factor`` fix the format), the
per-column weight quantization they share, and one runner for the sketched and full-rank products
(``int8_sketched_matmul``, ``int8_matmul``, ``fp8_sketched_matmul``). x arrives through DLPack (no
copy; a CUDA array on its framework's current stream); the C++ core runs with the GIL released;
C++ errors come back as Python exceptions. Format-specific bits live in _int8 (the CPU kernel
family) and _fp8 (the host's e4m3 encoding)."""
from libc.stdint cimport int64_t, uint8_t

from sketchcore cimport _sketchcore as core
from sketchcore._dlpack cimport ImportedTensor, is_torch_tensor
from sketchcore._epilogue cimport _activation, _real
from sketchcore._framework_gemm cimport _stream_of
from sketchcore._ops cimport _enter, _import
from sketchcore._sketchcore cimport Epilogue, QuantFormat

from collections import namedtuple

from sketchcore import _framework

import numpy


# One row of the bindings' table of formats (the core's is quant_format_info): the core's enumerator
# (an int), the Python type's name, its codes argument, the codes' NumPy dtype and how errors name
# it, and max_value (a column's largest magnitude becomes ±max_value).
_Format = namedtuple("_Format", "code factor_type codes_argument dtype dtype_text max_value")
_FORMATS = {
    "int8": _Format(<int>QuantFormat.int8, "Int8Factor", "q", numpy.int8, "int8", 127.0),
    "fp8_e4m3": _Format(<int>QuantFormat.fp8_e4m3, "Fp8Factor", "codes", numpy.uint8, "uint8 (e4m3 codes)", 448.0),
}


def _as_numpy(obj, str op, str name):
    """A NumPy view of a CPU array from any DLPack producer (NumPy itself, torch CPU tensors), or
    a NumPy copy of a torch/CuPy CUDA array (factors are built on the host, once)."""
    if isinstance(obj, numpy.ndarray):
        return obj
    if is_torch_tensor(obj):
        if str(obj.layout) != "torch.strided":
            raise TypeError(f"{op}: {name}: expected a dense (strided) tensor, got layout {obj.layout} "
                            f"(call .to_dense() first)")
        obj = obj.detach()
        if obj.device.type != "cpu":
            obj = obj.cpu()
        if str(obj.dtype) == "torch.bfloat16":
            obj = obj.float()  # NumPy has no bfloat16; the float32 values are exact
        return obj.resolve_conj().resolve_neg().numpy()
    if hasattr(obj, "__dlpack__"):
        if _framework.is_cuda_array(obj) and hasattr(obj, "get"):
            return obj.get()  # CuPy: a host copy
        try:
            return numpy.from_dlpack(obj)
        except (BufferError, ValueError, TypeError, RuntimeError) as e:  # NumPy's message names no argument
            raise ValueError(f"{op}: {name}: could not read the array through DLPack "
                             f"({type(e).__name__}: {e})") from None
    raise TypeError(f"{op}: {name}: expected an array (NumPy, torch or another DLPack producer), "
                    f"got {type(obj).__name__}")


def _column_scales(w, str op, double max_value):
    """The float32 weight of `w` (a 2-D real floating array) and, per column, the scale
    ``max|column| / max_value`` and its inverse (an all-zero column: scale 1, inverse 0)."""
    wa = _as_numpy(w, op, "w")
    if wa.dtype.kind != "f":
        raise TypeError(f"{op}: w: expected a floating dtype, got {wa.dtype}")
    if wa.ndim != 2:
        raise ValueError(f"{op}: w: expected a 2-D array (k, n), got shape {wa.shape}")
    w32 = wa.astype(numpy.float32)
    if not numpy.isfinite(w32).all():
        raise ValueError(f"{op}: w: expected finite values, got a NaN or infinity (in float32)")
    max_abs = numpy.abs(w32).max(axis=0) if w32.shape[0] else numpy.zeros(w32.shape[1], numpy.float32)
    zero = max_abs == 0
    scale = (max_abs / numpy.float32(max_value)).astype(numpy.float32)
    scale[zero] = 1.0
    inverse = numpy.where(zero, numpy.float32(0), numpy.float32(max_value) / numpy.where(zero, 1, max_abs))
    return w32, scale, inverse.astype(numpy.float32)


cdef class QuantizedFactor:
    """A (k, n) matrix of codes of one format with one float32 scale per column (the base of
    :class:`Int8Factor` and :class:`Fp8Factor`, which fix the format). Immutable; may be shared
    by threads. ``shape`` is ``(k, n)``, ``nbytes`` the bytes held on the host, ``scale`` the
    column scales."""

    def __cinit__(self, *args, **kwargs):
        self.factor = NULL

    def __dealloc__(self):
        del self.factor

    cdef _build(self, str format, codes, scale):
        """Checks `codes` and `scale` by the format's table row and makes the core factor."""
        f = _FORMATS[format]
        self._format = format
        ca = _as_numpy(codes, f.factor_type, f.codes_argument)
        sa = _as_numpy(scale, f.factor_type, "scale")
        if ca.dtype != f.dtype:
            raise TypeError(f"{f.factor_type}: {f.codes_argument}: expected dtype {f.dtype_text}, got {ca.dtype}")
        if ca.ndim != 2:
            raise ValueError(f"{f.factor_type}: {f.codes_argument}: expected a 2-D array (k, n), got shape {ca.shape}")
        if sa.dtype != numpy.float32:
            raise TypeError(f"{f.factor_type}: scale: expected dtype float32, got {sa.dtype}")
        if sa.shape != (ca.shape[1],):
            raise ValueError(f"{f.factor_type}: scale: expected shape ({ca.shape[1]},) (one per column of "
                             f"{f.codes_argument}), got {sa.shape}")
        sa = numpy.ascontiguousarray(sa)
        cdef const uint8_t[:, :] cv = ca.view(numpy.uint8)
        cdef const float[::1] sv = sa
        cdef int64_t rows = ca.shape[0], cols = ca.shape[1]
        cdef int64_t row_stride = ca.strides[0], col_stride = ca.strides[1]
        cdef const uint8_t* cp = &cv[0, 0] if rows > 0 and cols > 0 else NULL
        cdef const float* sp = &sv[0] if cols > 0 else NULL
        cdef QuantFormat code = <QuantFormat><int>f.code
        with nogil:
            self.factor = core.make_quantized_factor(code, cp, rows, cols, row_stride, col_stride, sp).release()

    cdef _codes(self, dtype):
        out = numpy.empty((self.factor.rows(), self.factor.cols()), dtype=numpy.uint8)
        cdef uint8_t[:, ::1] ov = out
        if out.size:
            self.factor.unpack_codes(&ov[0, 0])
        return out.view(dtype)

    @property
    def shape(self):
        """(k, n)."""
        return (self.factor.rows(), self.factor.cols())

    @property
    def nbytes(self):
        """Bytes held on the host: the codes and scales (padded to multiples of 16) and, for
        int8, the CPU's packing (64-column panels of 4-row groups, scales, column sums)."""
        return self.factor.nbytes()

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
        return f"{type(self).__name__}(shape={self.shape}, nbytes={self.nbytes})"


cdef class Int8Factor(QuantizedFactor):
    """A (k, n) int8 matrix with one float32 scale per column, packed once for the int8 kernels.

    The factor's value is ``q[i, j] * scale[j]``. Construction stores ``q`` and packs it into the
    CPU kernels' layout (64-column panels, four rows of a column in 4 bytes) with the column sums
    the kernels need; the object owns that memory, is immutable and may be shared by threads.
    ``shape`` is ``(k, n)``; ``nbytes``, ``q`` and ``scale`` are described below.

    Parameters
    ----------
    q : array of int8, shape (k, n)
        Values in [-127, 127] (symmetric: -128 is refused). NumPy, a torch tensor or any
        DLPack producer; any strides. A CUDA array is copied to the host: the factor is packed
        there, and copied to a device on its first call there.
    scale : array of float32, shape (n,)
        Finite, non-negative column scales.

    Raises
    ------
    TypeError
        ``q`` not int8, ``scale`` not float32, or not arrays.
    ValueError
        ``q`` not 2-D, ``scale`` not of shape (n,), a -128 in ``q``, a negative or non-finite scale.

    Examples
    --------
    >>> import numpy as np
    >>> f = Int8Factor(np.array([[1, -2], [3, 127]], dtype=np.int8), np.array([0.5, 0.25], np.float32))
    >>> f.shape
    (2, 2)
    """

    def __cinit__(self, q, scale):
        self._build("int8", q, scale)

    @property
    def q(self):
        """A NumPy copy of the int8 values, shape (k, n)."""
        return self._codes(numpy.int8)


cdef class Fp8Factor(QuantizedFactor):
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
    >>> f = Fp8Factor(np.array([[56, 0], [184, 1]], np.uint8), np.array([0.5, 2.0], np.float32))
    >>> f.shape, f.scale.tolist()
    ((2, 2), [0.5, 2.0])
    """

    def __cinit__(self, codes, scale):
        self._build("fp8_e4m3", codes, scale)

    @property
    def codes(self):
        """A NumPy copy of the e4m3 codes, uint8, shape (k, n)."""
        return self._codes(numpy.uint8)


cdef QuantizedFactor _factor(obj, type cls, str name, str op):
    if not isinstance(obj, cls):
        raise TypeError(f"{op}: {name}: expected an {cls.__name__}, got {type(obj).__name__}")
    return <QuantizedFactor>obj


cdef _run(str op, x, QuantizedFactor first, QuantizedFactor second, bias, out, Epilogue& epilogue):
    """The one body of every quantized product: imports x, bias and out (allocating out in x's
    framework when not given), then runs the core with the GIL released. `second` None: the
    full-rank product with W = `first`; else the sketched one with S = `first`, U = `second`."""
    if is_torch_tensor(x) and x.requires_grad:
        x = x.detach()  # inference only: the quantized products have no backward
    stream = _stream_of(x)
    cdef ImportedTensor xt = _import(x, "x", False, stream)
    cdef ImportedTensor bt
    if bias is not None:
        if is_torch_tensor(bias) and bias.requires_grad:
            bias = bias.detach()
        bt = _import(bias, "bias", False, stream)
        epilogue.bias = bt.view
    if second is None:
        shape = tuple(core.quantized_matmul_output_shape(xt.view, first.factor[0]))
    else:
        shape = tuple(core.quantized_sketched_matmul_output_shape(xt.view, first.factor[0], second.factor[0]))
    cdef ImportedTensor ot
    if out is None:
        if type(x) is numpy.ndarray:
            out = numpy.empty(shape, dtype=numpy.float32)
        elif is_torch_tensor(x):
            out = x.new_empty(shape)
        else:
            out = _framework.empty_like(x, shape, dlpack_dtype="float32")
    ot = _import(out, "out", True, stream)
    if ot.read_only:
        raise ValueError(f"{op}: out: expected a writable array, got a read-only one")
    if ot.is_copy:
        raise ValueError(f"{op}: out: expected the array's own memory, got a copy made by its DLPack producer")
    _enter(x, stream)  # the call's CUDA stream, or for a CPU call no stream left from an earlier one
    if second is None:
        with nogil:
            core.quantized_matmul(xt.view, first.factor[0], ot.view, epilogue)
    else:
        with nogil:
            core.quantized_sketched_matmul(xt.view, first.factor[0], second.factor[0], ot.view, epilogue)
    return out


cdef _sketched(str op, type cls, x, S, U, bias, activation, inner_activation, out):
    """A sketched product of the format of `cls`: the factors' types and the activations checked here."""
    cdef QuantizedFactor s = _factor(S, cls, "S", op), u = _factor(U, cls, "U", op)
    cdef Epilogue epilogue
    epilogue.activation = _activation(activation, "activation", op)
    epilogue.inner_activation = _activation(inner_activation, "inner_activation", op)
    return _run(op, x, s, u, bias, out, epilogue)


def int8_sketched_matmul(x, S, U, *, bias=None, activation="none", inner_activation=None, out=None):
    """The sketched GEMM with int8 factors and dynamically quantized activations.

    Computes ``act(deq(q8(σ(deq(q8(x) @ S.q))) @ U.q) + bias)``, where ``q8`` quantizes each
    row symmetrically (row scale ``max|row| / 127``, values ``row * (127 / max|row|)`` in float32
    rounded half to even and clipped to [-127, 127]; an all-zero row gives zeros), the products
    accumulate exactly in int32, and ``deq`` multiplies by the row scale times the factor's column scale. σ is
    ``inner_activation``. The int8 kernels are AMX-INT8 (tiles of 16 rows; calls of fewer than 8
    rows take the AVX-512 VNNI kernel), AVX-512 VNNI, AVX-VNNI or AVX2 ones, the best this CPU has
    (``SKETCHCORE_INT8_ISA`` caps the choice).

    Parameters
    ----------
    x : array of float32, shape (..., d_in)
        NumPy, a torch tensor or another DLPack producer; any strides (read in place). On a
        CUDA device (CuPy, torch CUDA tensors; ``bias`` and ``out`` on the same device) the call
        runs on the framework's current stream with cuBLASLt int8 GEMMs, the factors copied to
        the device on their first call there. That path has not yet run on a GPU: it needs the
        gated path ``cuda_int8_factors`` open (see :func:`sketchcore.gated_paths`).
    S : Int8Factor, shape (d_in, r)
    U : Int8Factor, shape (r, d_out)
    bias : array of float32, shape (d_out,), optional
    activation, inner_activation : {"none", "relu", "gelu", "gelu_tanh", "silu"}, optional
        The output activation and σ; ``None`` means ``"none"``.
    out : array of float32, shape (..., d_out), optional
        Written in place and returned: writable, unit last stride, leading dimensions that
        collapse, no overlap with ``x`` or ``bias``.

    Returns
    -------
    array
        ``out`` if given, else a new float32 array of ``x``'s framework (NumPy in, NumPy out;
        torch in, torch out), shape ``x.shape[:-1] + (d_out,)``.

    Raises
    ------
    TypeError
        ``S``/``U`` not Int8Factor, ``x``/``bias``/``out`` not float32 arrays, ``bias``/``out``
        not on ``x``'s device, or ``x`` on a CUDA device in a build without the CUDA backend.
    ValueError
        Extents that do not chain, a wrong bias or out, an unknown activation.
    RuntimeError
        ``x`` on a CUDA device while the gated path ``cuda_int8_factors`` is closed (the message
        names it and how to open it), or a CUDA failure.

    Examples
    --------
    >>> import numpy as np
    >>> S = Int8Factor(np.full((4, 2), 127, np.int8), np.full(2, 1 / 127, np.float32))
    >>> U = Int8Factor(np.full((2, 3), 127, np.int8), np.full(3, 1 / 127, np.float32))
    >>> int8_sketched_matmul(np.ones((1, 4), np.float32), S, U).round(4)
    array([[8., 8., 8.]], dtype=float32)
    """
    return _sketched("int8_sketched_matmul", Int8Factor, x, S, U, bias, activation, inner_activation, out)


def int8_matmul(x, W, *, bias=None, activation=None, scale=1.0, inner_activation=None, out=None):
    """The full-rank int8 product: one int8 GEMM on a dense weight, activations quantized per row.

    Computes ``act(scale * deq(q8(x) @ W.q) + bias)``, where ``q8`` quantizes each row of ``x``
    symmetrically (row scale ``s = max|row| / 127``, values ``row * (127 / max|row|)`` in float32
    rounded half to even and clipped to [-127, 127]; an all-zero row gives zeros; a row with a
    NaN or infinity gives a NaN row), the product accumulates exactly in int32, and ``deq``
    multiplies column ``j`` by ``s * W.scale[j]`` (``scale`` folded into ``s``). The kernels are
    those of :func:`int8_sketched_matmul` (``int8_gemm_isa()`` names the family).

    Parameters
    ----------
    x : array of float32, shape (..., d_in)
        NumPy, a torch tensor or another DLPack producer; any strides (read in place). On a CUDA
        device (``bias`` and ``out`` there too) the call is one cuBLASLt int8 GEMM on the
        framework's current stream, W copied to the device on its first call there; that path has
        not yet run on a GPU and needs the gated path ``cuda_int8_factors`` open.
    W : Int8Factor, shape (d_in, d_out)
        The weight as ``x @ W`` reads it (the transpose of ``nn.Linear.weight``), one scale per
        output column.
    bias, activation, out
        As for :func:`int8_sketched_matmul` (``bias`` and ``out`` with d_out = ``W.shape[1]``).
    scale : float, optional
        A finite factor applied before the bias (default 1).
    inner_activation : None or "none", optional
        Accepted so the call mirrors :func:`int8_sketched_matmul`: a full-rank product has no inner
        product, and any other name is a ValueError naming ``inner_activation``.

    Returns
    -------
    array
        ``out`` if given, else a new float32 array of ``x``'s framework, ``x.shape[:-1] + (d_out,)``.

    Raises
    ------
    TypeError, ValueError
        As :func:`int8_sketched_matmul` (``W`` in place of ``S``/``U``: not an Int8Factor, or
        ``x.shape[-1] != W.shape[0]``), and ValueError for a non-finite scale or an inner activation.
    RuntimeError
        ``x`` on a CUDA device while the gated path ``cuda_int8_factors`` is closed.

    Examples
    --------
    >>> import numpy as np
    >>> W = Int8Factor(np.array([[127, 0], [0, -127]], np.int8), np.full(2, 1 / 127, np.float32))
    >>> int8_matmul(np.array([[2.0, -2.0]], np.float32), W, bias=np.ones(2, np.float32)).round(4)
    array([[3., 3.]], dtype=float32)
    """
    cdef str op = "int8_matmul"
    cdef QuantizedFactor w = _factor(W, Int8Factor, "W", op)
    cdef Epilogue epilogue
    epilogue.activation = _activation(activation, "activation", op)
    epilogue.inner_activation = _activation(inner_activation, "inner_activation", op)
    epilogue.scale = _real(scale, "scale")
    return _run(op, x, w, None, bias, out, epilogue)


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
    S, U : Fp8Factor, shapes (d_in, r) and (r, d_out)
    bias, activation, inner_activation, out
        As for :func:`int8_sketched_matmul`.

    Returns
    -------
    array
        ``out`` if given, else a new float32 array of ``x``'s framework (``x.shape[:-1] + (d_out,)``).

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
    return _sketched("fp8_sketched_matmul", Fp8Factor, x, S, U, bias, activation, inner_activation, out)
