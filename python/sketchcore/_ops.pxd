# cython: language_level=3
# The call helpers of sketchcore._ops that other binding modules (sketchcore._sketch) share:
# which stream a call runs on, borrowing an array ready on that stream, and making the
# stream current for the core.
from sketchcore._dlpack cimport ImportedTensor

cdef object _stream_of(object x)
cdef ImportedTensor _import(object obj, str name, bint for_writing, object stream)
cdef int _enter(object x, object stream) except -1
