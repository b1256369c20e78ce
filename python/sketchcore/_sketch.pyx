# cython: language_level=3
"""Bindings of the sketching operators (see sketchcore.sketch for the Python API)."""
from libc.stdint cimport int64_t, uint64_t
from libcpp.string cimport string
from libcpp.vector cimport vector

from sketchcore cimport _sketchcore as core
from sketchcore._dlpack cimport ImportedTensor
from sketchcore._errors cimport check
from sketchcore._ops cimport _enter_cuda, _import, _stream_of
from sketchcore._sketchcore cimport ErrorKind

from sketchcore._ops import _empty_like


def validate(str kind, int64_t m, int64_t n, uint64_t seed, int64_t nnz, bint scaled):
    cdef string message
    check(core.sketch_validate(kind.encode(), m, n, seed, nnz, scaled, message), message)


def to_dense(str kind, int64_t m, int64_t n, uint64_t seed, int64_t nnz, bint scaled, out,
             int64_t row0=0, int64_t col0=0):
    stream = _stream_of(out)
    cdef ImportedTensor ot = _import(out, "out", True, stream)
    if ot.read_only:
        raise ValueError("sketch.to_dense: out: expected a writable array, got a read-only one")
    cdef string message, k = kind.encode()
    cdef ErrorKind status
    _enter_cuda(stream)
    with nogil:
        status = core.sketch_to_dense(k, m, n, seed, nnz, scaled, ot.view, row0, col0, message)
    check(status, message)
    return out


def apply(str kind, int64_t m, int64_t n, uint64_t seed, int64_t nnz, bint scaled, a, bint right,
          bint transpose, out=None):
    stream = _stream_of(a)
    cdef ImportedTensor at = _import(a, "a", False, stream)
    cdef string message, k = kind.encode()
    cdef vector[int64_t] shape
    check(core.sketch_output_shape(k, m, n, seed, nnz, scaled, at.view, right, transpose, shape, message), message)
    cdef ImportedTensor ot
    if out is None:
        out = _empty_like(a, tuple(shape), core.dtype_name(at.view.dtype()).decode())
    ot = _import(out, "out", True, stream)
    if ot.read_only:
        raise ValueError("sketch.apply: out: expected a writable array, got a read-only one")
    cdef ErrorKind status
    _enter_cuda(stream)
    with nogil:
        status = core.sketch_apply(k, m, n, seed, nnz, scaled, at.view, ot.view, right, transpose, message)
    check(status, message)
    return out
