# cython: language_level=3
"""The epilogue's arguments from Python (activation names, scale, dropout, seed, inner activation,
bias) checked once and turned into the core's ``Epilogue``, for every binding that runs one: the
forward and backward of ``sketchcore._ops``. The core checks them again in C++; the checks here
exist for their messages (``scale: expected a real number, got str``) and to draw a seed."""
cimport cython

from sketchcore cimport _sketchcore as core
from sketchcore._dlpack cimport ImportedTensor
from sketchcore._sketchcore cimport Activation, Epilogue

from numbers import Real

from sketchcore import _framework


@cython.freelist(4)  # one per call: no allocation once warm
cdef class _EpilogueArgs:
    """Checked epilogue arguments shared by the forward and the backward, as the core's
    Epilogue (its bias is set by the caller; the attribute is declared in _epilogue.pxd)."""


cdef double _real(object value, str name) except? -1.0:
    """`value` as a double; a real number too large for one is a ValueError naming `name`."""
    # Exact float first: the numbers.Real check goes through the ABC machinery.
    if type(value) is float:
        return value
    if type(value) is not int and (isinstance(value, bool) or not isinstance(value, Real)):
        raise TypeError(f"{name}: expected a real number, got {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:
        text = repr(value)
        raise ValueError(f"sketched_matmul: {name}: expected a finite number, got "
                         f"{text if len(text) <= 40 else text[:20] + '...' + text[-8:]} (too large for a float64)") from None


# Activation name -> the core's enumerator (as an int): a dict lookup instead of encoding and
# parsing the name on every call; unknown names go to the core's parser for its message. The one
# name table of the bindings (_fastcall re-exports it as ACTIVATION_CODES).
ACTIVATION_CODES = {core.activation_name(a).decode(): <int>a for a in core.all_activations()}
_ACTIVATION_CODES = ACTIVATION_CODES


cdef Activation _activation(value, str name, str op) except *:
    """The core's enumerator of the activation named `value` (None means "none"), for the argument
    `name` of `op`: a TypeError for a value that is not a str, a ValueError listing the valid names
    for an unknown one."""
    if value is None:
        value = "none"
    if not isinstance(value, str):
        raise TypeError(f"{op}: {name}: expected a str such as 'relu' or None, got {type(value).__name__}")
    code = ACTIVATION_CODES.get(value)
    if code is None:
        raise ValueError(f"{op}: {name}: expected one of {tuple(ACTIVATION_CODES)}, got {value!r}")
    return <Activation><int>code


cdef int _inner_activation_code(inner_activation, str op) except -1:
    """The core's enumerator of the inner activation (None means "none"), as an int."""
    return <int>_activation(inner_activation, "inner_activation", op)


cdef _EpilogueArgs _epilogue_args(activation, scale, dropout_p, seed, bint draw_seed, inner_activation=None,
                                  str op="sketched_matmul"):
    cdef _EpilogueArgs e = _EpilogueArgs.__new__(_EpilogueArgs)
    if activation is None:
        activation = "none"
    elif not isinstance(activation, str):
        raise TypeError(f"activation: expected a str such as 'relu', got {type(activation).__name__}")
    code = _ACTIVATION_CODES.get(activation)
    e.epilogue.activation = (<Activation><int>code if code is not None
                             else core.parse_activation(activation.encode("utf-8")))
    e.epilogue.inner_activation = <Activation>_inner_activation_code(inner_activation, op)
    e.epilogue.scale = _real(scale, "scale")
    e.epilogue.dropout_p = _real(dropout_p, "dropout_p")
    if seed is None and e.epilogue.dropout_p == 0.0:  # the common case: nothing to check or draw
        e.epilogue.seed = 0
        return e
    drawn = _framework.checked_seed(seed, "sketched_matmul", draw=draw_seed and e.epilogue.dropout_p != 0.0)
    if drawn is None and seed is None and e.epilogue.dropout_p != 0.0:
        raise ValueError("sketched_matmul_backward: seed: expected the forward's dropout seed, got None")
    e.epilogue.seed = 0 if drawn is None else drawn
    return e


cdef int _set_bias(Epilogue& epilogue, ImportedTensor bias) except -1:
    if bias is not None:
        epilogue.bias = bias.view
    return 0
