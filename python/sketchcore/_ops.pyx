# cython: language_level=3
"""Bindings of the sketchcore operations. Arguments arrive through DLPack (no copy); the
C++ core runs with the GIL released; C++ errors come back as Python exceptions."""
import secrets
import sys
from numbers import Integral, Real

from libc.stdint cimport int64_t, uint64_t, uintptr_t
from libcpp.string cimport string
from libcpp.vector cimport vector

from sketchcore cimport _sketchcore as core
from sketchcore._dlpack cimport ImportedTensor, import_array
from sketchcore._errors cimport check
from sketchcore._sketchcore cimport ErrorKind, TensorView

from sketchcore import _cuda

from sketchcore._dlpack import DLPackBuffer

import numpy

_numpy_ndarray = numpy.ndarray
_numpy_empty = numpy.empty


def _empty_like(x, shape, str dtype):
    """An uninitialised array of `x`'s framework, dtype and device (allocated once).
    `dtype` is the element type DLPack reported for `x` (used where `x` has no dtype)."""
    np = sys.modules.get("numpy")
    if np is not None and type(x) is np.ndarray:
        return np.empty(shape, dtype=x.dtype)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return torch.empty(shape, dtype=x.dtype, device=x.device)
    if np is not None and isinstance(x, np.ndarray):  # ndarray subclasses
        return np.empty(shape, dtype=x.dtype)
    namespace = getattr(x, "__array_namespace__", None)
    if namespace is not None:  # array API standard (CuPy, JAX, ...)
        return namespace().empty(shape, dtype=x.dtype, device=x.device)
    # Any other DLPack producer: memory owned by sketchcore, handed out as a NumPy array.
    import numpy
    return numpy.from_dlpack(DLPackBuffer(shape, dtype))


cdef object _stream_of(object x):
    """None when x is a CPU array, else the CUDA stream its framework currently uses."""
    if type(x) is _numpy_ndarray or not _cuda.is_cuda_array(x):
        return None
    return _cuda.current_stream(x)


cdef ImportedTensor _import(object obj, str name, bint for_writing, object stream):
    """Borrows `obj`; a CUDA array is asked to be ready on `stream` (the call's stream)."""
    if stream is not None and _cuda.is_cuda_array(obj):
        return import_array(obj, name, for_writing, _cuda.dlpack_stream(stream))
    return import_array(obj, name, for_writing)


cdef ImportedTensor _import_optional(obj, str name, object stream):
    """Borrows `obj` through DLPack, or returns None for None."""
    return None if obj is None else _import(obj, name, False, stream)


cdef int _enter_cuda(object stream) except -1:
    """Makes the call's stream (and the TF32 setting) current for this thread's next core
    call, after making sure cuBLASLt can be found."""
    if stream is not None:
        _cuda.preload_cublaslt()
        core.set_thread_execution(<uintptr_t>stream, _cuda.get_allow_tf32())
    return 0


cdef const TensorView* _view_or_null(ImportedTensor t):
    if t is None:
        return NULL
    return &t.view


cdef class _EpilogueArgs:
    """Checked epilogue arguments shared by the forward and the backward."""
    cdef string activation
    cdef double scale
    cdef double dropout_p
    cdef uint64_t seed


cdef double _real(object value, str name) except? -1.0:
    """`value` as a double; a real number too large for one is a ValueError naming `name`."""
    # Exact float first: the numbers.Real check goes through the ABC machinery.
    if type(value) is float:
        return value
    if type(value) is not int and (isinstance(value, bool) or not isinstance(value, Real)):
        raise TypeError(f"{name}: expected a real number, got {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:
        text = repr(value)
        raise ValueError(f"sketched_matmul: {name}: expected a finite number, got "
                         f"{text if len(text) <= 40 else text[:20] + '...' + text[-8:]} (too large for a float64)") from None


cdef _EpilogueArgs _epilogue_args(activation, scale, dropout_p, seed, bint draw_seed):
    cdef _EpilogueArgs e = _EpilogueArgs.__new__(_EpilogueArgs)
    if activation is None:
        activation = "none"
    elif not isinstance(activation, str):
        raise TypeError(f"activation: expected a str such as 'relu', got {type(activation).__name__}")
    e.activation = activation.encode("utf-8")
    e.scale = _real(scale, "scale")
    e.dropout_p = _real(dropout_p, "dropout_p")
    e.seed = 0
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, Integral):
            raise TypeError(f"seed: expected an int or None, got {type(seed).__name__}")
        if not 0 <= seed < 2**64:
            raise ValueError(f"sketched_matmul: seed: expected an integer in [0, 2**64), got {seed}")
        e.seed = seed
    elif e.dropout_p != 0.0:
        if not draw_seed:
            raise ValueError("sketched_matmul_backward: seed: expected the forward's dropout seed, got None")
        e.seed = secrets.randbits(64)
    return e


def sketched_matmul(x, S, U, *, bias=None, activation="none", scale=1.0, dropout_p=0.0, seed=None, out=None,
                    intermediate=None):
    """Sketched matrix product with a fused epilogue.

    Computes ``dropout(activation(scale * sum_t (x @ S[t]) @ U[t] + bias), dropout_p, seed)``
    as one pair of GEMMs (``x @ [S_1 ... S_T] @ [U_1; ...; U_T]``), never a loop over the
    terms, with the epilogue applied to each output panel while it is in cache.

    Parameters
    ----------
    x : array, shape (..., d_in)
        Input with any number of leading dimensions. Any DLPack producer (NumPy, PyTorch,
        CuPy, ...); float32 or float64.
    S : array, shape (d_in, k) or (T, d_in, k)
        Left factors, one per term.
    U : array, shape (k, d_out) or (T, k, d_out)
        Right factors; 2-D exactly when ``S`` is 2-D.
    bias : array, shape (d_out,), optional
        Added after scaling, before the activation.
    activation : {"none", "relu", "gelu", "gelu_tanh", "silu"}
        ``"gelu"`` is the exact (erf) form, ``"gelu_tanh"`` the tanh approximation.
        ``None`` means ``"none"``.
    scale : float
        Multiplies the product (a finite real number), applied in the arrays' dtype (a
        float32 call rounds it to float32).
    dropout_p : float
        Inverted dropout after the activation: each element is zeroed with probability
        ``dropout_p`` and the others are multiplied by ``1 / (1 - dropout_p)``; 0 (default)
        disables it, 1 zeroes everything.
    seed : int, optional
        Dropout seed in [0, 2**64). The mask of output element (row, col) (row counted over
        all leading dimensions) is a pure function of (seed, row, col) via Philox4x32-10, so
        it is the same for any thread count; ``None`` draws a fresh seed.
    out : array, shape (..., d_out), optional
        Written in place (no copy) and returned. Must be writable, of the same dtype and
        device, and must not overlap any input.
    intermediate : array, shape (..., T·k), optional
        Receives Z = x @ [S_1 ... S_T] for :func:`sketched_matmul_backward` (row-major
        rows: unit last stride and leading dimensions that collapse).

    Returns
    -------
    array
        ``out`` if given, else a new array of ``x``'s framework on ``x``'s device (NumPy in,
        NumPy out; torch in, torch out), shape ``x.shape[:-1] + (d_out,)``.

    Notes
    -----
    No input is copied by the binding. Operands whose rows (or columns) have unit stride
    and whose leading dimensions collapse into one stride are read in place by BLAS; any
    other layout (for example ``x[:, ::2]``) is packed into a temporary by the core, one
    extra pass over that operand. The GIL is released while computing. A zero-size batch
    returns an empty result.

    Raises
    ------
    ValueError
        Shapes that do not fit (d_in, k or T mismatch, 2-D S with 3-D U, bias length, out
        shape), an unknown activation, a non-finite scale, dropout_p outside [0, 1], a seed
        outside [0, 2**64), a read-only or overlapping out.
    MemoryError
        The temporaries would exceed the limit set with ``sketchcore.memory.set_limit``.
    TypeError
        Non-arrays, integer/complex/bool or mixed dtypes, arrays on different devices.
    """
    cdef _EpilogueArgs e = _epilogue_args(activation, scale, dropout_p, seed, True)
    stream = _stream_of(x)
    cdef ImportedTensor xt = _import(x, "x", False, stream)
    cdef ImportedTensor st = _import(S, "S", False, stream)
    cdef ImportedTensor ut = _import(U, "U", False, stream)
    cdef ImportedTensor bt = _import_optional(bias, "bias", stream)
    cdef const TensorView* bias_view = _view_or_null(bt)

    cdef string message
    cdef vector[int64_t] shape
    cdef ErrorKind kind = core.output_shape(xt.view, st.view, ut.view, shape, message)
    check(kind, message)

    cdef ImportedTensor ot
    if out is None:
        if type(x) is _numpy_ndarray:  # the common case, without the generic dispatch
            out = _numpy_empty(tuple(shape), dtype=x.dtype)
        else:
            out = _empty_like(x, tuple(shape), core.dtype_name(xt.view.dtype()).decode())
        ot = _import(out, "out", True, stream)
    else:
        ot = _import(out, "out", True, stream)
        if ot.read_only:
            raise ValueError("sketched_matmul: out: expected a writable array, got a read-only one")
        if ot.is_copy:
            raise ValueError("sketched_matmul: out: expected the array's own memory, "
                             "got a copy made by its DLPack producer")

    cdef ImportedTensor zt
    _enter_cuda(stream)
    if intermediate is None:
        with nogil:
            kind = core.sketched_matmul(xt.view, st.view, ut.view, ot.view, bias_view, e.scale, e.activation,
                                        e.dropout_p, e.seed, message)
    else:
        zt = _import(intermediate, "intermediate", True, stream)
        if zt.read_only:
            raise ValueError("sketched_matmul: intermediate: expected a writable array, got a read-only one")
        with nogil:
            kind = core.sketched_matmul_saving(xt.view, st.view, ut.view, ot.view, bias_view, e.scale, e.activation,
                                               e.dropout_p, e.seed, zt.view, message)
    check(kind, message)
    return out


_GRADIENTS = ("x", "S", "U", "bias")


def _term_range(value, name):
    """(begin, end) of a term range; (0, -1) stands for all terms."""
    if value is None:
        return 0, -1
    if (not isinstance(value, tuple) or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
        raise TypeError(f"sketched_matmul_backward: {name}: expected None or a pair of ints (begin, end), "
                        f"got {value!r}")
    if value[0] < 0 or value[1] < 0:  # no Python-style negative indices: (0, -1) is not "all but the last"
        raise ValueError(f"sketched_matmul_backward: {name}: expected a range 0 ≤ begin ≤ end ≤ T, "
                         f"got [{value[0]}, {value[1]})")
    return value


def _restricted(shape, begin, end):
    """A factor's shape restricted to terms [begin, end) (checked by the core)."""
    if end == -1 or len(shape) != 3:
        return shape
    return (max(0, end - begin),) + shape[1:]


def sketched_matmul_backward(grad_out, x, S, U, intermediate, *, bias=None, activation="none", scale=1.0,
                             dropout_p=0.0, seed=None, needs=None, S_terms=None, U_terms=None):
    """Gradients of :func:`sketched_matmul` with respect to x, S, U and bias.

    ``y = dropout(activation(scale * (x @ Sp) @ Up + bias))`` with ``Sp = [S_1 ... S_T]``;
    given ``grad_out = dL/dy`` and the ``intermediate`` Z = x @ Sp that the forward wrote,
    returns ``(dx, dS, dU, dbias)`` with ``None`` for the ones not in ``needs`` (default:
    all, dbias only when there is a bias). The
    activation and dropout backward are fused: H is recomputed from Z with one GEMM only
    when the activation needs it, and the dropout mask is regenerated from ``seed`` (which
    must be the forward's). Five GEMMs at most; temporaries from the pool. Results are
    arrays of ``grad_out``'s framework; ``relu'(0) = 0`` as in PyTorch.

    ``S_terms=(begin, end)`` computes dS only for the terms ``begin <= t < end`` (dS then
    has shape ``(end - begin, d_in, k)``), and only those columns of its GEMM; likewise
    ``U_terms`` for dU. ``None`` means all terms. A layer whose S and U each mix learnable
    and fixed terms (Panther's ``SKLinear``) saves a quarter of the backward's FLOPs so.

    Raises ValueError/TypeError as :func:`sketched_matmul`, and ValueError for an unknown
    name in ``needs``, ``"bias"`` without a bias, or dropout without its seed.
    """
    cdef _EpilogueArgs e = _epilogue_args(activation, scale, dropout_p, seed, False)
    if needs is None:
        wanted = _GRADIENTS if bias is not None else _GRADIENTS[:3]
    elif isinstance(needs, (str, bytes)) or not hasattr(needs, "__iter__"):
        # A string is iterable, but "xU" is not the collection ("x", "U").
        raise TypeError(f"sketched_matmul_backward: needs: expected a collection of names from {_GRADIENTS} "
                        f"such as ('x', 'S'), got {type(needs).__name__} {needs!r}")
    else:
        wanted = tuple(needs)
    for name in wanted:
        if not isinstance(name, str) or name not in _GRADIENTS:
            raise ValueError(f"sketched_matmul_backward: needs: expected names from {_GRADIENTS}, got {name!r}")
    if "bias" in wanted and bias is None:
        raise ValueError("sketched_matmul_backward: needs: 'bias' requested but bias is None")
    stream = _stream_of(x)
    cdef ImportedTensor gt = _import(grad_out, "grad_out", False, stream)
    cdef ImportedTensor xt = _import(x, "x", False, stream)
    cdef ImportedTensor st = _import(S, "S", False, stream)
    cdef ImportedTensor ut = _import(U, "U", False, stream)
    cdef ImportedTensor zt = _import(intermediate, "intermediate", False, stream)
    cdef ImportedTensor bt = _import_optional(bias, "bias", stream)
    cdef const TensorView* bias_view = _view_or_null(bt)
    cdef string message
    cdef vector[int64_t] out_shape
    # x, S and U checked first: the gradients' shapes below are read from them.
    check(core.output_shape(xt.view, st.view, ut.view, out_shape, message), message)
    dtype = core.dtype_name(xt.view.dtype()).decode()
    results = []
    cdef list imported = []
    cdef const TensorView* views[4]
    cdef ImportedTensor t
    cdef int i
    cdef int64_t s_begin, s_end, u_begin, u_end
    s_begin, s_end = _term_range(S_terms, "S_terms")
    u_begin, u_end = _term_range(U_terms, "U_terms")
    shapes = (tuple(xt.shape), _restricted(tuple(st.shape), s_begin, s_end),
              _restricted(tuple(ut.shape), u_begin, u_end), (ut.shape[-1],))
    for i, name in enumerate(_GRADIENTS):
        views[i] = NULL
        if name in wanted:
            array = _empty_like(grad_out, shapes[i], dtype)
            t = _import(array, "grad " + name, True, stream)
            imported.append(t)
            views[i] = &t.view
            results.append(array)
        else:
            results.append(None)
    cdef ErrorKind kind
    _enter_cuda(stream)
    with nogil:
        kind = core.sketched_matmul_backward(gt.view, xt.view, st.view, ut.view, zt.view, bias_view, e.scale,
                                             e.activation, e.dropout_p, e.seed, views[0], views[1], views[2],
                                             views[3], s_begin, s_end, u_begin, u_end, message)
    check(kind, message)
    return tuple(results)


def set_num_threads(num_threads):
    """Sets how many CPU threads sketchcore (its own loops and its BLAS) may use (≥ 1)."""
    if isinstance(num_threads, bool) or not hasattr(num_threads, "__index__"):
        raise TypeError(f"set_num_threads: num_threads: expected an int, got {type(num_threads).__name__}")
    num_threads = num_threads.__index__()
    if num_threads < 1:
        raise ValueError(f"set_num_threads: num_threads: expected an integer ≥ 1, got {num_threads}")
    if num_threads > 2**31 - 1:
        raise ValueError(f"set_num_threads: num_threads: expected an integer ≤ 2**31 - 1, got {num_threads}")
    cdef string message
    check(core.set_num_threads(num_threads, message), message)


def get_num_threads():
    """Returns the CPU thread count sketchcore uses."""
    return core.get_num_threads()


def build_info():
    """Describes how the native library was built: version, BLAS, CUDA."""
    info = core.build_info()
    return {
        "version": info.version.decode(),
        "blas": info.blas.decode(),
        "cuda": bool(info.cuda),
        "cuda_runtime_version": info.cuda_runtime_version,
    }


def cuda_device_count():
    """Number of CUDA devices sketchcore can use: 0 without the CUDA backend, a driver or a
    device."""
    return core.cuda_device_count()
