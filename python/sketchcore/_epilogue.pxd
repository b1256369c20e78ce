# cython: language_level=3
# The epilogue's arguments checked and turned into the core's Epilogue (sketchcore._epilogue),
# shared by the bindings that run an epilogue.
from sketchcore._dlpack cimport ImportedTensor
from sketchcore._sketchcore cimport Activation, Epilogue

cdef class _EpilogueArgs:
    cdef Epilogue epilogue

cdef double _real(object value, str name) except? -1.0
cdef Activation _activation(value, str name, str op) except *
cdef int _inner_activation_code(inner_activation, str op) except -1
cdef _EpilogueArgs _epilogue_args(activation, scale, dropout_p, seed, bint draw_seed, inner_activation=*,
                                  str op=*)
cdef int _set_bias(Epilogue& epilogue, ImportedTensor bias) except -1
