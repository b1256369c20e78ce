# cython: language_level=3
# What the other binding modules take from sketchcore._framework_gemm: the CUDA stream of an
# array, the provider of a framework's BLAS, and which framework an array belongs to.
from sketchcore cimport _sketchcore as core

cdef const core.CpuGemmProvider* _framework_provider(int framework) noexcept
cdef int _framework_of(object x) except -3
cdef object _stream_of(object x)
