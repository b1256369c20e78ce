# cython: language_level=3
"""Bindings of the sketching operators (see sketchcore.sketch for the Python API)."""
from libc.stdint cimport int64_t, uint64_t
from libcpp.vector cimport vector

from sketchcore cimport _sketchcore as core
from sketchcore._dlpack cimport ImportedTensor
from sketchcore._framework_gemm cimport _stream_of
from sketchcore._ops cimport _enter, _import
from sketchcore._sketchcore cimport Side, SketchOperator

from sketchcore import _framework
from sketchcore._ops import _empty_like


cdef SketchOperator _operator(str kind, int64_t m, int64_t n, uint64_t seed, int64_t nnz, bint scaled) except *:
    cdef SketchOperator op
    op.kind = core.parse_sketch_kind(kind.encode())
    op.rows = m
    op.cols = n
    op.seed = seed
    op.nnz = nnz
    op.scaled = scaled
    core.validate_sketch(op)
    return op


def validate(str kind, int64_t m, int64_t n, uint64_t seed, int64_t nnz, bint scaled):
    _operator(kind, m, n, seed, nnz, scaled)


def to_dense(str kind, int64_t m, int64_t n, uint64_t seed, int64_t nnz, bint scaled, out,
             int64_t row0=0, int64_t col0=0):
    cdef SketchOperator op = _operator(kind, m, n, seed, nnz, scaled)
    _framework.check_writable_framework(out, "sketch.to_dense")
    stream = _stream_of(out)
    cdef ImportedTensor ot = _import(out, "out", True, stream)
    if ot.read_only:
        raise ValueError("sketch.to_dense: out: expected a writable array, got a read-only one")
    _enter(out, stream)
    with nogil:
        core.sketch_to_dense(op, ot.view, row0, col0)
    return out


def apply(str kind, int64_t m, int64_t n, uint64_t seed, int64_t nnz, bint scaled, a, bint right,
          bint transpose, out=None):
    cdef SketchOperator op = _operator(kind, m, n, seed, nnz, scaled)
    cdef Side side = Side.right if right else Side.left
    stream = _stream_of(a)
    cdef ImportedTensor at = _import(a, "a", False, stream)
    cdef vector[int64_t] shape = core.sketch_apply_output_shape(op, at.view, side, transpose)
    cdef ImportedTensor ot
    if out is None:
        out = _empty_like(a, tuple(shape), core.dtype_name(at.view.dtype()).decode())
    else:
        _framework.check_writable_framework(out, "sketch.apply")
    ot = _import(out, "out", True, stream)
    if ot.read_only:
        raise ValueError("sketch.apply: out: expected a writable array, got a read-only one")
    _enter(a, stream)
    with nogil:
        core.sketch_apply(op, at.view, ot.view, side, transpose)
    return out
