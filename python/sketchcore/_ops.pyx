# cython: language_level=3
"""Bindings of the sketchcore operations. Arguments arrive through DLPack (no copy); the
C++ core runs with the GIL released; C++ errors come back as Python exceptions."""
import sys

cimport cython

from libc.stdint cimport int64_t, uint64_t, uintptr_t
from libcpp.string cimport string
from libcpp.vector cimport vector

from sketchcore cimport _sketchcore as core
from sketchcore._dlpack cimport (Borrowed, ImportedTensor, borrow_torch, fresh_view, import_array, is_torch_tensor,
                                 release_all, torch_device)
from sketchcore._framework_gemm cimport _framework_of, _framework_provider, _stream_of
from sketchcore._epilogue cimport _EpilogueArgs, _epilogue_args, _set_bias
from sketchcore._sketchcore cimport Activation, Epilogue, SketchedMatmulGradients, TensorView

from sketchcore import _cuda, _framework


import numpy

_numpy_ndarray = numpy.ndarray
_numpy_empty = numpy.empty


def _empty_like(x, shape, str dtype):
    """An uninitialised array of `x`'s framework, dtype and device (see _framework)."""
    if type(x) is _numpy_ndarray:  # the common cases, without the generic dispatch
        return _numpy_empty(shape, dtype=x.dtype)
    if torch_device(x) != -2:
        return x.new_empty(shape)
    return _framework.empty_like(x, shape, dlpack_dtype=dtype)


cdef object _new_array(x, tuple shape, const TensorView& like):
    """An uninitialised array of `x`'s framework, dtype and device (see _framework); `like`
    (x's view) gives the element type of a DLPack producer without a framework API."""
    if type(x) is _numpy_ndarray:  # the common cases, without the generic dispatch
        return _numpy_empty(shape, dtype=x.dtype)
    if is_torch_tensor(x):
        return x.new_empty(*shape)  # 0.3 µs less than with the tuple
    return _framework.empty_like(x, shape, dlpack_dtype=core.dtype_name(like.dtype()).decode())


cdef ImportedTensor _import(object obj, str name, bint for_writing, object stream):
    """Borrows `obj`; a CUDA array is asked to be ready on `stream` (the call's stream)."""
    cdef int device
    if stream is not None:
        device = torch_device(obj)
        if device >= 0 or (device == -2 and _framework.is_cuda_array(obj)):
            return import_array(obj, name, for_writing, stream if stream != 0 else 1)  # DLPack's legacy stream: 1
    return import_array(obj, name, for_writing)


cdef ImportedTensor _import_optional(obj, str name, object stream):
    """Borrows `obj` through DLPack, or returns None for None."""
    return None if obj is None else _import(obj, name, False, stream)


cdef int _enter(object x, object stream) except -1:
    """Sets the calling thread's execution options for the core call that follows: the
    call's CUDA stream (and the TF32 setting, after making sure cuBLASLt can be found), or
    for a CPU call the BLAS of x's framework (see _cpu_blas)."""
    cdef int framework
    if stream is not None:
        _cuda.preload_cublaslt()
        core.set_thread_execution(<uintptr_t>stream, _cuda.get_allow_tf32(), NULL, _cuda.get_gemm_tuning())
        return 0
    # No stream: a CPU call, so a plain torch tensor is a CPU one (no device query again).
    framework = 1 if is_torch_tensor(x) else _framework_of(x)
    core.set_thread_execution(0, False, _framework_provider(framework) if framework >= 0 else NULL, False)
    return 0


cdef tuple _output_shape(const TensorView& x, const TensorView& S, const TensorView& U):
    """x.shape[:-1] + (U.shape[-1],), the shape of the output to allocate. For a small output
    read, not validated: the core validates once, in the call, and an output allocated for
    operands that do not fit is never written. Operands whose ranks leave no such shape, and
    outputs of over 2**20 elements (whose allocation could fail before the core names the
    argument, and whose arithmetic dwarfs a second check), are validated by the core first."""
    if x.ndim() < 1 or U.ndim() < 1 or (S.ndim() != 2 and S.ndim() != 3):
        core.sketched_matmul_output_shape(x, S, U)  # raises the core's message
    cdef double count = U.shape().back()  # in floating point: a threshold, never overflows
    cdef int d
    for d in range(x.ndim() - 1):
        count *= x.shape()[d]
    if count > (1 << 20):
        core.sketched_matmul_output_shape(x, S, U)
    cdef list shape = x.shape()
    shape[len(shape) - 1] = U.shape().back()
    return tuple(shape)


cdef bint _plain_torch(x, S, U, bias) except -1:
    """Whether every operand is a plain torch tensor that does not require gradient (a tensor
    that does goes through DLPack, which refuses it with its message)."""
    for t in (x, S, U, bias):
        if t is not None and (not is_torch_tensor(t) or t.requires_grad):
            return False
    return True


# Operand elements up to which a CPU call keeps the GIL: a few µs of arithmetic at most, less
# than handing the GIL over and taking it back costs another thread in waiting.
cdef enum:
    _TINY = 1 << 14


cdef object _torch_call(x, S, U, bias, _EpilogueArgs e, stream):
    """sketched_matmul on plain torch tensors: borrowed onto the stack (no ImportedTensor, no
    capsule bookkeeping object per operand; see _dlpack.borrow_torch), output by torch."""
    cdef Borrowed held
    held.count = 0
    cdef TensorView xv, sv, uv, bv, yv
    try:
        borrow_torch(x, "x", &xv, &held)
        borrow_torch(S, "S", &sv, &held)
        borrow_torch(U, "U", &uv, &held)
        if bias is not None:
            borrow_torch(bias, "bias", &bv, &held)
            e.epilogue.bias = bv
        shape = _output_shape(xv, sv, uv)
        y = x.new_empty(*shape)
        fresh_view(y, shape, xv, &yv)
        _enter(x, stream)
        if stream is None and xv.numel() + sv.numel() + uv.numel() <= _TINY:
            core.sketched_matmul(xv, sv, uv, yv, e.epilogue)  # shorter than releasing the GIL
        else:
            with nogil:
                core.sketched_matmul(xv, sv, uv, yv, e.epilogue)
        return y
    finally:
        release_all(&held)


def sketched_matmul(x, S, U, *, bias=None, activation="none", scale=1.0, dropout_p=0.0, seed=None, out=None,
                    intermediate=None, inner_activation=None):
    """Sketched matrix product with a fused epilogue.

    Computes ``dropout(activation(scale * sum_t σ(x @ S[t]) @ U[t] + bias), dropout_p, seed)``
    as one pair of GEMMs (``σ(x @ [S_1 ... S_T]) @ [U_1; ...; U_T]``), never a loop over the
    terms, with the epilogue applied to each output panel while it is in cache. σ is
    ``inner_activation`` (a CoLA-style bottleneck activation; identity by default), applied
    to the intermediate as the first product's epilogue.

    Parameters
    ----------
    x : array, shape (..., d_in)
        Input with any number of leading dimensions. Any DLPack producer (NumPy, PyTorch,
        CuPy, ...); float16, bfloat16, float32 or float64 (the 16-bit types computed with
        float32 accumulation, on the CPU and on CUDA devices).
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
        rows: unit last stride and leading dimensions that collapse); with an inner
        activation Z is its input (pre-activation), from which the backward recomputes σ(Z).
    inner_activation : {"none", "relu", "gelu", "gelu_tanh", "silu"}, optional
        σ applied to the (..., T·k) intermediate before the second product; ``None`` means
        ``"none"``.

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

    Examples
    --------
    >>> import numpy as np
    >>> x, S, U = np.ones((2, 3)), np.ones((3, 2)), np.ones((2, 4))
    >>> sketched_matmul(x, S, U, scale=0.5, activation="relu")
    array([[3., 3., 3., 3.],
           [3., 3., 3., 3.]])
    >>> sketched_matmul(x, S, np.ones((3, 4)))
    Traceback (most recent call last):
    ValueError: ...
    """
    cdef _EpilogueArgs e = _epilogue_args(activation, scale, dropout_p, seed, True, inner_activation)
    stream = _stream_of(x)
    if out is None and intermediate is None and _plain_torch(x, S, U, bias):
        return _torch_call(x, S, U, bias, e, stream)
    cdef ImportedTensor xt = _import(x, "x", False, stream)
    cdef ImportedTensor st = _import(S, "S", False, stream)
    cdef ImportedTensor ut = _import(U, "U", False, stream)
    cdef ImportedTensor bt = _import_optional(bias, "bias", stream)
    _set_bias(e.epilogue, bt)
    cdef ImportedTensor ot
    if out is None:
        out = _new_array(x, _output_shape(xt.view, st.view, ut.view), xt.view)
        ot = _import(out, "out", True, stream)
    else:
        if type(out) is not _numpy_ndarray:
            _framework.check_writable_framework(out, "sketched_matmul")
        ot = _import(out, "out", True, stream)
        if ot.read_only:
            raise ValueError("sketched_matmul: out: expected a writable array, got a read-only one")
        if ot.is_copy:
            raise ValueError("sketched_matmul: out: expected the array's own memory, "
                             "got a copy made by its DLPack producer")

    cdef ImportedTensor zt
    _enter(x, stream)
    if intermediate is None:
        with nogil:
            core.sketched_matmul(xt.view, st.view, ut.view, ot.view, e.epilogue)
    else:
        zt = _import(intermediate, "intermediate", True, stream)
        if zt.read_only:
            raise ValueError("sketched_matmul: intermediate: expected a writable array, got a read-only one")
        with nogil:
            core.sketched_matmul(xt.view, st.view, ut.view, ot.view, e.epilogue, zt.view)
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
                             dropout_p=0.0, seed=None, needs=None, S_terms=None, U_terms=None,
                             inner_activation=None):
    """Gradients of :func:`sketched_matmul` with respect to x, S, U and bias.

    ``y = dropout(activation(scale * σ(x @ Sp) @ Up + bias))`` with ``Sp = [S_1 ... S_T]``
    and σ the ``inner_activation`` (σ(Z) and σ'(Z) are recomputed from the saved Z);
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

    Parameters
    ----------
    grad_out : array, shape (..., d_out)
        dL/dy.
    x, S, U, bias, activation, scale, dropout_p, seed, inner_activation
        The forward's arguments (``seed`` is required when ``dropout_p > 0``).
    intermediate : array, shape (..., T·k)
        Z as written by the forward's ``intermediate``.
    needs : collection of {"x", "S", "U", "bias"}, optional
        Gradients to compute; default all (``"bias"`` only with a bias).
    S_terms, U_terms : tuple of two ints, optional
        ``(begin, end)`` term ranges of dS and dU; ``None`` means all terms.

    Returns
    -------
    tuple
        ``(dx, dS, dU, dbias)``: arrays of ``grad_out``'s framework, ``None`` where not needed.

    Raises
    ------
    ValueError
        As :func:`sketched_matmul`; an unknown name in ``needs``, ``"bias"`` without a bias,
        dropout without its seed, a negative or out-of-range term range.
    TypeError
        As :func:`sketched_matmul`; ``needs`` a string or not a collection, a term range that
        is not a pair of ints.

    Examples
    --------
    >>> import numpy as np
    >>> x, S, U = np.ones((2, 3)), np.ones((3, 2)), np.ones((2, 4))
    >>> Z = np.empty((2, 2))
    >>> y = sketched_matmul(x, S, U, intermediate=Z)
    >>> dx, dS, dU, dbias = sketched_matmul_backward(np.ones((2, 4)), x, S, U, Z, needs=("x", "U"))
    >>> dx
    array([[8., 8., 8.],
           [8., 8., 8.]])
    >>> dS is None and dbias is None
    True
    >>> sketched_matmul_backward(np.ones((2, 4)), x, S, U, Z, needs=("bias",))
    Traceback (most recent call last):
    ValueError: sketched_matmul_backward: needs: 'bias' requested but bias is None
    """
    cdef _EpilogueArgs e = _epilogue_args(activation, scale, dropout_p, seed, False, inner_activation,
                                          "sketched_matmul_backward")
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
    _set_bias(e.epilogue, bt)
    # x, S and U checked first: the gradients' shapes below are read from them.
    core.sketched_matmul_output_shape(xt.view, st.view, ut.view)
    cdef SketchedMatmulGradients grads
    grads.S_terms.begin, grads.S_terms.end = _term_range(S_terms, "S_terms")
    grads.U_terms.begin, grads.U_terms.end = _term_range(U_terms, "U_terms")
    shapes = (tuple(xt.shape), _restricted(tuple(st.shape), grads.S_terms.begin, grads.S_terms.end),
              _restricted(tuple(ut.shape), grads.U_terms.begin, grads.U_terms.end), (ut.shape[-1],))
    results = []
    cdef list imported = []  # keeps the borrowed outputs alive during the call
    cdef ImportedTensor t
    for name, shape in zip(_GRADIENTS, shapes):
        if name not in wanted:
            results.append(None)
            continue
        array = _new_array(grad_out, tuple(shape), xt.view)
        t = _import(array, "grad " + name, True, stream)
        imported.append(t)
        if name == "x":
            grads.x = t.view
        elif name == "S":
            grads.S = t.view
        elif name == "U":
            grads.U = t.view
        else:
            grads.bias = t.view
        results.append(array)
    _enter(x, stream)
    with nogil:
        core.sketched_matmul_backward(gt.view, xt.view, st.view, ut.view, zt.view, e.epilogue, grads)
    return tuple(results)
