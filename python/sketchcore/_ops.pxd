# cython: language_level=3
# The call helpers of sketchcore._ops that other binding modules (sketchcore._sketch,
# sketchcore._fastcall, sketchcore._int8, sketchcore._fp8) share: borrowing an array ready on the
# call's stream (which stream: sketchcore._framework_gemm._stream_of), and setting the calling
# thread's execution options for the core call (that stream, or a CPU call's BLAS and no stream).
from sketchcore._dlpack cimport ImportedTensor

cdef ImportedTensor _import(object obj, str name, bint for_writing, object stream)
cdef int _enter(object x, object stream) except -1
