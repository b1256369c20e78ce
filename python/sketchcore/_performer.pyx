# cython: language_level=3
"""Bindings of Performer attention (sketchcore.performer_attention and its backward): arrays
through DLPack (no copy), the core run with the GIL released, outputs allocated by the
caller's framework."""
from libcpp.optional cimport optional

from sketchcore cimport _sketchcore as core
from sketchcore._dlpack cimport ImportedTensor
from sketchcore._framework_gemm cimport _stream_of
from sketchcore._ops cimport _enter, _import
from sketchcore._sketchcore cimport PerformerGradients, PerformerKernel, PerformerOptions, TensorView

from sketchcore import _framework
from sketchcore._ops import _empty_like

_KERNELS = {"softmax": 0, "relu": 1}
_GRADIENTS = ("q", "k", "v")


cdef PerformerOptions _options(str op, kernel, causal) except *:
    cdef PerformerOptions options
    code = _KERNELS.get(kernel) if isinstance(kernel, str) else None
    if code is None:
        raise ValueError(f"{op}: kernel: expected 'softmax' or 'relu', got {kernel!r}")
    if not isinstance(causal, bool):
        raise TypeError(f"{op}: causal: expected a bool, got {type(causal).__name__}")
    options.kernel = <PerformerKernel><int>code
    options.causal = causal
    return options


cdef ImportedTensor _optional(obj, str name, stream):
    return None if obj is None else _import(obj, name, False, stream)


cdef optional[TensorView] _view(ImportedTensor t):
    cdef optional[TensorView] view
    if t is not None:
        view = t.view
    return view


cdef tuple _output_shape(const TensorView& q, const TensorView& v):
    """(B, H, L, e) from q and v; a placeholder (0,) when their ranks do not fit (the core then
    names the argument before it looks at the output)."""
    if q.ndim() != 4 or v.ndim() != 4:
        return (0,)
    return (q.shape()[0], q.shape()[1], q.shape()[2], v.shape()[3])


cdef ImportedTensor _writable(obj, str op, str name, stream):
    _framework.check_writable_framework(obj, op)
    cdef ImportedTensor t = _import(obj, name, True, stream)
    if t.read_only:
        raise ValueError(f"{op}: {name}: expected a writable array, got a read-only one")
    if t.is_copy:
        raise ValueError(f"{op}: {name}: expected the array's own memory, got a copy made by its DLPack producer")
    return t


def performer_attention(q, k, v, features, *, kernel="softmax", causal=False, key_weights=None,
                        value_weights=None, out=None):
    """Performer (FAVOR+) attention, linear in the sequence lengths, with the feature map
    computed inside the kernels: no L × m feature array is ever formed.

    For every batch b and head h::

        out[b, h, i] = Σ_j (φ(q_i)·φ(k_j))·a_j·w_j·v_j / max(Σ_j (φ(q_i)·φ(k_j))·a_j, tiny)

    over all keys j, or over j ≤ i when ``causal``; ``a = key_weights[b]`` and
    ``w = value_weights[b, h]`` (1 when omitted), ``tiny`` the smallest normal number of the
    compute type. With W = ``features`` (m, d) and x' = x·d^(-1/4):

    * ``"softmax"`` (FAVOR+ positive features): φ(x) = m^(-1/2)·(exp(x'·Wᵀ − ‖x'‖²/2 − c) + 1e-5),
      c the largest entry of x'·Wᵀ over the features (queries), over the features and all keys
      of the (batch, head) (keys); in causal mode keys have no 1e-5 and c is the running maximum
      of the earlier keys' exponents (it cancels in each ratio; never from a later token), which
      keeps float32 accurate at any head dimension;
    * ``"relu"``: φ(x) = relu(m^(-1/2)·x·Wᵀ) + 1e-5.

    These are the formulas of :class:`sketchcore.torch.RandMultiHeadAttention` (Panther's).
    Sums over keys are joined block by block with Kahan's compensation, so their float32 error
    does not grow with the sequence length (about 130·2⁻²⁴ of the sum of the terms' sizes).

    Parameters
    ----------
    q : array, shape (B, H, L, d)
        Queries. Any DLPack producer (NumPy, PyTorch, CuPy, ...); float16, bfloat16 (computed
        in float32), float32 or float64; any strides.
    k : array, shape (B, H, S, d)
        Keys (S = L when ``causal``).
    v : array, shape (B, H, S, e)
        Values.
    features : array, shape (m, d)
        The random features W; q's dtype or float32.
    kernel : {"softmax", "relu"}
    causal : bool
        Query i attends to keys j ≤ i only.
    key_weights : array, shape (B, S), optional
        Multiplies φ(k_j) in numerator and normaliser: 0 ignores a key exactly (padding).
        q's dtype or float32.
    value_weights : array, shape (B, H, S), optional
        Multiplies v_j in the numerator only (attention dropout that removes keys, with
        keep/(1 − p)). q's dtype or float32.
    out : array, shape (B, H, L, e), optional
        Written in place and returned; q's dtype and device, any strides, no overlap with an
        input.

    Returns
    -------
    array
        ``out``, or a new array of q's framework on q's device.

    Raises
    ------
    ValueError
        Shapes that do not fit (naming the argument, expected and actual shape), causal
        attention with S ≠ L, an unknown kernel, a read-only or overlapping ``out``.
    TypeError
        Mismatching dtypes or devices, ``causal`` not a bool.
    RuntimeError
        Arrays on a CUDA device while the gated path ``cuda_performer_kernels`` is closed (the
        fused CUDA kernels have not yet passed their tests on a GPU; ``SKETCHCORE_CUDA_UNVERIFIED=1``
        or :func:`sketchcore.set_gated_path` opens it; :func:`sketchcore.torch.performer_attention`
        runs a verified composite formula on torch CUDA tensors instead).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = (rng.standard_normal((1, 2, 5, 4)) for _ in range(3))
    >>> W = rng.standard_normal((8, 4))
    >>> out = performer_attention(q, k, v, W, causal=True)
    >>> out.shape
    (1, 2, 5, 4)
    >>> np.allclose(out[:, :, 0], v[:, :, 0])  # the first query sees only the first key
    True
    """
    cdef PerformerOptions options = _options("performer_attention", kernel, causal)
    stream = _stream_of(q)
    cdef ImportedTensor qt = _import(q, "q", False, stream)
    cdef ImportedTensor kt = _import(k, "k", False, stream)
    cdef ImportedTensor vt = _import(v, "v", False, stream)
    cdef ImportedTensor ft = _import(features, "features", False, stream)
    cdef ImportedTensor at = _optional(key_weights, "key_weights", stream)
    cdef ImportedTensor wt = _optional(value_weights, "value_weights", stream)
    if out is None:
        out = _empty_like(q, _output_shape(qt.view, vt.view), core.dtype_name(qt.view.dtype()).decode())
    cdef ImportedTensor ot = _writable(out, "performer_attention", "out", stream)
    cdef optional[TensorView] a = _view(at), w = _view(wt)
    _enter(q, stream)
    with nogil:
        core.performer_attention(qt.view, kt.view, vt.view, ft.view, ot.view, options, a, w)
    return out


def performer_attention_backward(grad_out, q, k, v, features, out, *, kernel="softmax", causal=False,
                                 key_weights=None, value_weights=None, needs=None):
    """Gradients of :func:`performer_attention` with respect to q, k and v.

    Given ``grad_out`` = dL/dout and the forward's ``out`` (with the forward's other arguments),
    returns ``(dq, dk, dv)``, ``None`` for those not in ``needs``. The features and the states
    are recomputed block by block (nothing of size L × m is formed); the maxima inside the
    softmax features are differentiated as computed, a maximum's gradient split evenly among
    tied entries (as torch's ``amax``). ``features`` and the weights get no gradient. For
    float16/bfloat16 operands ``out`` is recomputed in float32 rather than read, so the gradients
    are as accurate as 16-bit rounding of the exact ones.

    Parameters
    ----------
    grad_out : array, shape (B, H, L, e)
        dL/dout, q's dtype.
    q, k, v, features, out, kernel, causal, key_weights, value_weights
        As for :func:`performer_attention` (``out`` is its result).
    needs : collection of {"q", "k", "v"}, optional
        Gradients to compute; default all.

    Returns
    -------
    tuple
        ``(dq, dk, dv)``: arrays of grad_out's framework, ``None`` where not requested.

    Raises
    ------
    ValueError, TypeError, RuntimeError
        As :func:`performer_attention`; an unknown name in ``needs``.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = (rng.standard_normal((1, 1, 6, 4)) for _ in range(3))
    >>> W = rng.standard_normal((8, 4))
    >>> out = performer_attention(q, k, v, W, kernel="relu")
    >>> dq, dk, dv = performer_attention_backward(np.ones_like(out), q, k, v, W, out, kernel="relu")
    >>> dq.shape, dk.shape, dv.shape
    ((1, 1, 6, 4), (1, 1, 6, 4), (1, 1, 6, 4))
    """
    cdef PerformerOptions options = _options("performer_attention_backward", kernel, causal)
    if needs is None:
        wanted = _GRADIENTS
    elif isinstance(needs, (str, bytes)) or not hasattr(needs, "__iter__"):
        raise TypeError(f"performer_attention_backward: needs: expected a collection of names from {_GRADIENTS} "
                        f"such as ('q', 'k'), got {type(needs).__name__} {needs!r}")
    else:
        wanted = tuple(needs)
    for name in wanted:
        if not isinstance(name, str) or name not in _GRADIENTS:
            raise ValueError(f"performer_attention_backward: needs: expected names from {_GRADIENTS}, got {name!r}")
    stream = _stream_of(q)
    cdef ImportedTensor gt = _import(grad_out, "grad_out", False, stream)
    cdef ImportedTensor qt = _import(q, "q", False, stream)
    cdef ImportedTensor kt = _import(k, "k", False, stream)
    cdef ImportedTensor vt = _import(v, "v", False, stream)
    cdef ImportedTensor ft = _import(features, "features", False, stream)
    cdef ImportedTensor ot = _import(out, "out", False, stream)
    cdef ImportedTensor at = _optional(key_weights, "key_weights", stream)
    cdef ImportedTensor wt = _optional(value_weights, "value_weights", stream)
    cdef PerformerGradients grads
    cdef list imported = []  # keeps the borrowed gradients alive during the call
    cdef ImportedTensor t, source
    results = []
    dtype = core.dtype_name(qt.view.dtype()).decode()
    for name, source in zip(_GRADIENTS, (qt, kt, vt)):
        if name not in wanted:
            results.append(None)
            continue
        shape = tuple(source.view.shape()) if source.view.ndim() == 4 else (0,)
        array = _empty_like(grad_out, shape, dtype)
        t = _import(array, "grad " + name, True, stream)
        imported.append(t)
        if name == "q":
            grads.q = t.view
        elif name == "k":
            grads.k = t.view
        else:
            grads.v = t.view
        results.append(array)
    cdef optional[TensorView] a = _view(at), w = _view(wt)
    _enter(q, stream)
    with nogil:
        core.performer_attention_backward(gt.view, qt.view, kt.view, vt.view, ft.view, ot.view, options, a, w, grads)
    return tuple(results)
