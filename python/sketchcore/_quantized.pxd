# cython: language_level=3
# The quantized factor types (sketchcore._quantized), for the format-specific bindings that read
# the core factor behind them (_int8's benchmark hook).
from sketchcore cimport _sketchcore as core

cdef class QuantizedFactor:
    cdef core.QuantizedFactor* factor
    cdef object _format
    cdef _build(self, str format, codes, scale)
    cdef _codes(self, dtype)

cdef class Int8Factor(QuantizedFactor):
    pass

cdef class Fp8Factor(QuantizedFactor):
    pass
