# cython: language_level=3
"""Bindings of the int8 GEMMs (src/cpp/include/sketchcore/int8_matmul.hpp): the packed int8
factor, per-column weight quantization, the sketched product and the full-rank one. x arrives through DLPack
(no copy; a CUDA array on its framework's current stream); the C++ core runs with the GIL
released; C++ errors come back as Python exceptions."""
from libc.stdint cimport int64_t
from libcpp.string cimport string
from libcpp.vector cimport vector

from sketchcore cimport _sketchcore as core
from sketchcore._dlpack cimport ImportedTensor, is_torch_tensor
from sketchcore._epilogue cimport _real
from sketchcore._framework_gemm cimport _stream_of
from sketchcore._ops cimport _enter, _import
from sketchcore._sketchcore cimport Activation, Epilogue

from sketchcore import _framework

import numpy

_ACTIVATION_CODES = {core.activation_name(a).decode(): <int>a for a in core.all_activations()}


def _as_numpy(obj, str op, str name):
    """A NumPy view of a CPU array from any DLPack producer (NumPy itself, torch CPU tensors), or
    a NumPy copy of a torch/CuPy CUDA array (factors are packed on the host, once)."""
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


cdef class Int8Factor:
    """A (k, n) int8 matrix with one float32 scale per column, packed once for the int8 kernels.

    The factor's value is ``q[i, j] * scale[j]``. Construction copies ``q`` into the kernels'
    layout (64-column panels, four rows of a column in 4 bytes) and computes the column sums
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
    cdef core.Int8Factor* factor

    def __cinit__(self, q, scale):
        self.factor = NULL
        qa = _as_numpy(q, "Int8Factor", "q")
        sa = _as_numpy(scale, "Int8Factor", "scale")
        if qa.dtype != numpy.int8:
            raise TypeError(f"Int8Factor: q: expected dtype int8, got {qa.dtype}")
        if qa.ndim != 2:
            raise ValueError(f"Int8Factor: q: expected a 2-D array (k, n), got shape {qa.shape}")
        if sa.dtype != numpy.float32:
            raise TypeError(f"Int8Factor: scale: expected dtype float32, got {sa.dtype}")
        if sa.shape != (qa.shape[1],):
            raise ValueError(f"Int8Factor: scale: expected shape ({qa.shape[1]},) (one per column of q), "
                             f"got {sa.shape}")
        sa = numpy.ascontiguousarray(sa)
        cdef const signed char[:, :] qv = qa
        cdef const float[::1] sv = sa
        cdef int64_t rows = qa.shape[0], cols = qa.shape[1]
        cdef int64_t row_stride = qa.strides[0], col_stride = qa.strides[1]
        cdef const signed char* qp = &qv[0, 0] if rows > 0 and cols > 0 else NULL
        cdef const float* sp = &sv[0] if cols > 0 else NULL
        with nogil:
            self.factor = new core.Int8Factor(qp, rows, cols, row_stride, col_stride, sp)

    def __dealloc__(self):
        del self.factor

    @property
    def shape(self):
        """(k, n)."""
        return (self.factor.rows(), self.factor.cols())

    @property
    def nbytes(self):
        """Bytes held by the packing: values (padded to 64 columns and 4 rows), scales, column sums."""
        return self.factor.nbytes()

    @property
    def q(self):
        """A NumPy copy of the int8 values, shape (k, n)."""
        out = numpy.empty((self.factor.rows(), self.factor.cols()), dtype=numpy.int8)
        cdef signed char[:, ::1] ov = out
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
        return f"Int8Factor(shape={self.shape}, nbytes={self.nbytes})"


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
    wa = _as_numpy(w, "quantize_int8", "w")
    if wa.dtype.kind != "f":
        raise TypeError(f"quantize_int8: w: expected a floating dtype, got {wa.dtype}")
    if wa.ndim != 2:
        raise ValueError(f"quantize_int8: w: expected a 2-D array (k, n), got shape {wa.shape}")
    w32 = wa.astype(numpy.float32)
    if not numpy.isfinite(w32).all():
        raise ValueError("quantize_int8: w: expected finite values, got a NaN or infinity (in float32)")
    max_abs = numpy.abs(w32).max(axis=0) if w32.shape[0] else numpy.zeros(w32.shape[1], numpy.float32)
    scale = (max_abs / numpy.float32(127)).astype(numpy.float32)
    scale[max_abs == 0] = 1.0
    q = numpy.clip(numpy.rint(w32 / scale), -127, 127).astype(numpy.int8)
    return q, scale


cdef Activation _activation(value, str name, str op) except *:
    if value is None:
        value = "none"
    if not isinstance(value, str):
        raise TypeError(f"{op}: {name}: expected a str such as 'relu' or None, got {type(value).__name__}")
    code = _ACTIVATION_CODES.get(value)
    if code is None:
        raise ValueError(f"{op}: {name}: expected one of {tuple(_ACTIVATION_CODES)}, got {value!r}")
    return <Activation><int>code


cdef Int8Factor _factor(obj, str name, str op):
    if not isinstance(obj, Int8Factor):
        raise TypeError(f"{op}: {name}: expected an Int8Factor, got {type(obj).__name__}")
    return <Int8Factor>obj


cdef _run(str op, x, Int8Factor first, Int8Factor second, bias, out, Epilogue& epilogue):
    """The shared body of both products: imports x, bias and out (allocating out in x's framework
    when not given), then runs the core with the GIL released. `second` None: the full-rank
    int8_matmul with W = `first`; else int8_sketched_matmul with S = `first`, U = `second`."""
    if is_torch_tensor(x) and x.requires_grad:
        x = x.detach()  # inference only: the int8 products have no backward
    stream = _stream_of(x)
    cdef ImportedTensor xt = _import(x, "x", False, stream)
    cdef ImportedTensor bt
    if bias is not None:
        if is_torch_tensor(bias) and bias.requires_grad:
            bias = bias.detach()
        bt = _import(bias, "bias", False, stream)
        epilogue.bias = bt.view
    if second is None:
        shape = tuple(core.int8_matmul_output_shape(xt.view, first.factor[0]))
    else:
        shape = tuple(core.int8_sketched_matmul_output_shape(xt.view, first.factor[0], second.factor[0]))
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
            core.int8_matmul(xt.view, first.factor[0], ot.view, epilogue)
    else:
        with nogil:
            core.int8_sketched_matmul(xt.view, first.factor[0], second.factor[0], ot.view, epilogue)
    return out


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
    cdef str op = "int8_sketched_matmul"
    cdef Int8Factor s = _factor(S, "S", op), u = _factor(U, "U", op)
    cdef Epilogue epilogue
    epilogue.activation = _activation(activation, "activation", op)
    epilogue.inner_activation = _activation(inner_activation, "inner_activation", op)
    return _run(op, x, s, u, bias, out, epilogue)


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
    cdef Int8Factor w = _factor(W, "W", op)
    cdef Epilogue epilogue
    epilogue.activation = _activation(activation, "activation", op)
    epilogue.inner_activation = _activation(inner_activation, "inner_activation", op)
    epilogue.scale = _real(scale, "scale")
    return _run(op, x, w, None, bias, out, epilogue)


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


def _gemm_for_bench(x, Int8Factor factor, int64_t repeats=1):
    """Benchmark hook, private: the CPU int8 GEMM alone (one product of int8_sketched_matmul).
    ``x`` (rows × factor rows, float32 numpy) is quantized once, untimed; then the GEMM with its
    int32 → float32 dequantization runs ``repeats`` times. Returns (the float32 product, rows ×
    factor columns; the wall-clock seconds of each run)."""
    xa = numpy.ascontiguousarray(x, dtype=numpy.float32)
    if xa.ndim != 2 or xa.shape[1] != factor.factor.rows():
        raise ValueError(f"_gemm_for_bench: x: expected shape (rows, {factor.factor.rows()}), got {xa.shape}")
    cdef int64_t rows = xa.shape[0], cols = factor.factor.cols()
    out = numpy.empty((rows, cols), dtype=numpy.float32)
    cdef const float[:, ::1] xv = xa
    cdef float[:, ::1] ov = out
    cdef const float* xp = &xv[0, 0] if xa.size > 0 else NULL
    cdef float* op = &ov[0, 0] if out.size > 0 else NULL
    cdef vector[double] seconds
    with nogil:
        seconds = core.int8_gemm_seconds_for_bench(xp, rows, factor.factor[0], op, repeats)
    return out, list(seconds)
