# cython: language_level=3
"""The torch adapters' eager call path: one core call per direction on plain torch
tensors (``torch.Tensor`` or ``nn.Parameter``, CPU or CUDA), for the autograd.Functions of
``sketchcore.torch.ops._eager``.

Against the public ``sketched_matmul``/``sketched_matmul_backward`` it leaves out what the
adapters guarantee or the core checks anyway, which measured at most of a tiny layer's host time
(docs/performance_results.md, "Tiny layers"):
no keyword parsing, no Python-side checks of activation, scale, dropout and seed (the
activation arrives as the core's enumerator, from ``ACTIVATION_CODES``), no shape query
before allocating (the core validates once, in the call), no ``ImportedTensor`` per operand
(torch's C exporter straight into a view on the stack), and no ``detach()``: tensors that
require gradient are read, since autograd is the adapter's business. The public functions
keep refusing such tensors.
"""
from libc.stdint cimport int64_t, uint64_t
from libcpp.vector cimport vector

from sketchcore cimport _sketchcore as core
from sketchcore._dlpack cimport Borrowed, borrow_torch, fresh_view, release_all
from sketchcore._framework_gemm cimport _stream_of
from sketchcore._ops cimport _enter
from sketchcore._sketchcore cimport Activation, Epilogue, SketchedMatmulGradients, TensorView, join_views

#: Activation name -> the core's enumerator, as an int (the adapters look it up once per call).
from sketchcore._epilogue import ACTIVATION_CODES


cdef int _factor(object first, object second, str name, TensorView* view, Borrowed* held) except -1:
    """`first`, or [first; second] joined along dimension 0 without a copy: 1 when joined (or
    no `second`), 0 when `second` does not continue `first` in memory (the caller then joins
    them with torch.cat)."""
    cdef TensorView head, tail
    borrow_torch(first, name, &head, held)
    if second is None:
        view[0] = head
        return 1
    borrow_torch(second, name, &tail, held)
    return 1 if join_views(head, tail, view[0]) else 0


cdef tuple _shape(const vector[int64_t]& extents, int64_t last, bint replace_last):
    """extents (with the last one replaced by `last` when `replace_last`) as a tuple."""
    cdef list out = list(extents)
    if replace_last:
        out[len(out) - 1] = last
    return tuple(out)


cdef int _check_ranks(const TensorView& x, const TensorView& S, const TensorView& U) except -1:
    """Lets the core validate first where the outputs could not be allocated: operands whose
    ranks leave no output shape, and outputs of over 2**20 elements (see _ops._output_shape)."""
    if x.ndim() < 1 or U.ndim() < 1 or (S.ndim() != 2 and S.ndim() != 3):
        core.sketched_matmul_output_shape(x, S, U)  # raises the core's message
        return 0
    cdef object rows = 1
    cdef int d
    for d in range(x.ndim() - 1):
        rows *= x.shape()[d]
    width = S.shape().back() * (S.shape()[0] if S.ndim() == 3 else 1)
    if rows * (U.shape().back() + width) > 1 << 20:  # elements of y and Z
        core.sketched_matmul_output_shape(x, S, U)
    return 0


cdef int _epilogue(Epilogue* e, int activation, double scale, double dropout_p, uint64_t seed,
                   int inner_activation) except -1:
    e.activation = <Activation>activation
    e.inner_activation = <Activation>inner_activation
    e.scale = scale
    e.dropout_p = dropout_p
    e.seed = seed
    return 0


def forward(x, S, U, bias, int activation, double scale, double dropout_p, uint64_t seed, bint keep_intermediate,
            S_next=None, U_next=None, int inner_activation=0):
    """``act(scale · σ(x [S; S_next]) [U; U_next] + bias)`` with dropout (σ: the
    ``inner_activation`` code, 0 = none): ``(y, Z)`` when ``keep_intermediate`` (Z = x·S, before
    σ, for the backward), else ``y``; ``None`` when S_next (or U_next) does not continue S (U)
    in memory."""
    cdef Borrowed held
    held.count = 0
    cdef TensorView xv, sv, uv, bv, yv, zv
    cdef Epilogue e
    stream = _stream_of(x)
    try:
        borrow_torch(x, "x", &xv, &held)
        if not _factor(S, S_next, "S", &sv, &held) or not _factor(U, U_next, "U", &uv, &held):
            return None
        _check_ranks(xv, sv, uv)
        _epilogue(&e, activation, scale, dropout_p, seed, inner_activation)
        if bias is not None:
            borrow_torch(bias, "bias", &bv, &held)
            e.bias = bv
        shape = _shape(xv.shape(), uv.shape().back(), True)
        y = x.new_empty(*shape)
        fresh_view(y, shape, xv, &yv)
        if not keep_intermediate:
            _enter(x, stream)
            with nogil:
                core.sketched_matmul(xv, sv, uv, yv, e)
            return y
        width = sv.shape().back() * (sv.shape()[0] if sv.ndim() == 3 else 1)
        shape = _shape(xv.shape(), width, True)
        z = x.new_empty(*shape)
        fresh_view(z, shape, xv, &zv)
        _enter(x, stream)
        with nogil:
            core.sketched_matmul(xv, sv, uv, yv, e, zv)
        return y, z
    finally:
        release_all(&held)


cdef tuple _restricted(const vector[int64_t]& extents, int64_t begin, int64_t end):
    """A factor's shape restricted to the terms [begin, end) (end −1: all; checked by the core)."""
    cdef list out = list(extents)
    if end != -1 and len(out) == 3:
        out[0] = max(0, end - begin)
    return tuple(out)


def backward(grad, x, S, U, z, bias, int activation, double scale, double dropout_p, uint64_t seed,
             bint need_x, bint need_S, bint need_U, bint need_bias, S_next=None, U_next=None,
             int64_t S_begin=0, int64_t S_end=-1, int64_t U_begin=0, int64_t U_end=-1, int inner_activation=0):
    """``(dx, dS, dU, dbias)`` of :func:`forward` (None where not needed; dS only for the terms
    [S_begin, S_end), dU for [U_begin, U_end)); ``None`` when a factor pair is not joined."""
    cdef Borrowed held
    held.count = 0
    cdef TensorView gv, xv, sv, uv, zv, bv, out
    cdef Epilogue e
    cdef SketchedMatmulGradients grads
    stream = _stream_of(x)
    try:
        borrow_torch(grad, "grad_out", &gv, &held)
        borrow_torch(x, "x", &xv, &held)
        if not _factor(S, S_next, "S", &sv, &held) or not _factor(U, U_next, "U", &uv, &held):
            return None
        borrow_torch(z, "intermediate", &zv, &held, True)
        _check_ranks(xv, sv, uv)
        _epilogue(&e, activation, scale, dropout_p, seed, inner_activation)
        if bias is not None:
            borrow_torch(bias, "bias", &bv, &held)
            e.bias = bv
        grads.S_terms.begin, grads.S_terms.end = S_begin, S_end
        grads.U_terms.begin, grads.U_terms.end = U_begin, U_end
        dx = dS = dU = db = None
        if need_x:
            shape = _shape(xv.shape(), 0, False)
            dx = x.new_empty(*shape)
            fresh_view(dx, shape, xv, &out)
            grads.x = out
        if need_S:
            shape = _restricted(sv.shape(), S_begin, S_end)
            dS = x.new_empty(*shape)
            fresh_view(dS, shape, xv, &out)
            grads.S = out
        if need_U:
            shape = _restricted(uv.shape(), U_begin, U_end)
            dU = x.new_empty(*shape)
            fresh_view(dU, shape, xv, &out)
            grads.U = out
        if need_bias and bias is not None:
            shape = (uv.shape().back(),)
            db = x.new_empty(*shape)
            fresh_view(db, shape, xv, &out)
            grads.bias = out
        _enter(x, stream)
        with nogil:
            core.sketched_matmul_backward(gv, xv, sv, uv, zv, e, grads)
        return dx, dS, dU, db
    finally:
        release_all(&held)
