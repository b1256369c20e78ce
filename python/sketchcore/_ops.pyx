# cython: language_level=3
"""Bindings of the sketchcore operations. Arguments arrive through DLPack (no copy); the
C++ core runs with the GIL released; C++ errors come back as Python exceptions."""
import secrets
import sys
from numbers import Integral, Real

from libc.stdint cimport int64_t, uint64_t
from libcpp.string cimport string
from libcpp.vector cimport vector

from sketchcore cimport _sketchcore as core
from sketchcore._dlpack cimport ImportedTensor, import_array
from sketchcore._errors cimport check
from sketchcore._sketchcore cimport ErrorKind, TensorView

from sketchcore._dlpack import DLPackBuffer

import numpy

_numpy_ndarray = numpy.ndarray
_numpy_empty = numpy.empty


def _empty_like(x, shape, str dtype):
    """An uninitialised array of `x`'s framework, dtype and device (allocated once).
    `dtype` is the element type DLPack reported for `x` (used where `x` has no dtype)."""
    np = sys.modules.get("numpy")
    if np is not None and type(x) is np.ndarray:
        return np.empty(shape, dtype=x.dtype)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return torch.empty(shape, dtype=x.dtype, device=x.device)
    if np is not None and isinstance(x, np.ndarray):  # ndarray subclasses
        return np.empty(shape, dtype=x.dtype)
    namespace = getattr(x, "__array_namespace__", None)
    if namespace is not None:  # array API standard (CuPy, JAX, ...)
        return namespace().empty(shape, dtype=x.dtype, device=x.device)
    # Any other DLPack producer: memory owned by sketchcore, handed out as a NumPy array.
    import numpy
    return numpy.from_dlpack(DLPackBuffer(shape, dtype))


def sketched_matmul(x, S, U, *, bias=None, activation="none", scale=1.0, dropout_p=0.0, seed=None, out=None):
    """Sketched matrix product with a fused epilogue.

    Computes ``dropout(activation(scale * sum_t (x @ S[t]) @ U[t] + bias), dropout_p, seed)``
    as one pair of GEMMs (``x @ [S_1 ... S_T] @ [U_1; ...; U_T]``), never a loop over the
    terms, with the epilogue applied to each output panel while it is in cache.

    Parameters
    ----------
    x : array, shape (..., d_in)
        Input with any number of leading dimensions. Any DLPack producer (NumPy, PyTorch,
        CuPy, ...); float32 or float64.
    S : array, shape (d_in, k) or (T, d_in, k)
        Left factors, one per term.
    U : array, shape (k, d_out) or (T, k, d_out)
        Right factors; 2-D exactly when ``S`` is 2-D.
    bias : array, shape (d_out,), optional
        Added after scaling, before the activation.
    activation : {"none", "relu", "gelu", "gelu_tanh", "silu"}
        ``"gelu"`` is the exact (erf) form, ``"gelu_tanh"`` the tanh approximation.
        ``None`` means ``"none"``.
    scale : float
        Multiplies the product (a finite real number), applied in the arrays' dtype (a
        float32 call rounds it to float32).
    dropout_p : float
        Inverted dropout after the activation: each element is zeroed with probability
        ``dropout_p`` and the others are multiplied by ``1 / (1 - dropout_p)``; 0 (default)
        disables it, 1 zeroes everything.
    seed : int, optional
        Dropout seed in [0, 2**64). The mask of output element (row, col) (row counted over
        all leading dimensions) is a pure function of (seed, row, col) via Philox4x32-10, so
        it is the same for any thread count; ``None`` draws a fresh seed.
    out : array, shape (..., d_out), optional
        Written in place (no copy) and returned. Must be writable, of the same dtype and
        device, and must not overlap any input.

    Returns
    -------
    array
        ``out`` if given, else a new array of ``x``'s framework on ``x``'s device (NumPy in,
        NumPy out; torch in, torch out), shape ``x.shape[:-1] + (d_out,)``.

    Notes
    -----
    No input is copied by the binding. Operands whose rows (or columns) have unit stride
    and whose leading dimensions collapse into one stride are read in place by BLAS; any
    other layout (for example ``x[:, ::2]``) is packed into a temporary by the core, one
    extra pass over that operand. The GIL is released while computing. A zero-size batch
    returns an empty result.

    Raises
    ------
    ValueError
        Shapes that do not fit (d_in, k or T mismatch, 2-D S with 3-D U, bias length, out
        shape), an unknown activation, a non-finite scale, dropout_p outside [0, 1], a seed
        outside [0, 2**64), a read-only or overlapping out.
    MemoryError
        The temporaries would exceed the limit set with ``sketchcore.memory.set_limit``.
    TypeError
        Non-arrays, integer/complex/bool or mixed dtypes, arrays on different devices.
    """
    if activation is None:
        activation = "none"
    elif not isinstance(activation, str):
        raise TypeError(f"activation: expected a str such as 'relu', got {type(activation).__name__}")
    # Exact float/int first: the numbers.Real check goes through the ABC machinery.
    if type(scale) is not float and type(scale) is not int and not isinstance(scale, Real):
        raise TypeError(f"scale: expected a real number, got {type(scale).__name__}")
    cdef double scale_value = scale
    if type(dropout_p) is not float and type(dropout_p) is not int and not isinstance(dropout_p, Real):
        raise TypeError(f"dropout_p: expected a real number, got {type(dropout_p).__name__}")
    cdef double dropout_value = dropout_p
    cdef uint64_t seed_value = 0
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, Integral):
            raise TypeError(f"seed: expected an int or None, got {type(seed).__name__}")
        if not 0 <= seed < 2**64:
            raise ValueError(f"sketched_matmul: seed: expected an integer in [0, 2**64), got {seed}")
        seed_value = seed
    elif dropout_value != 0.0:
        seed_value = secrets.randbits(64)

    cdef ImportedTensor xt = import_array(x, "x", False)
    cdef ImportedTensor st = import_array(S, "S", False)
    cdef ImportedTensor ut = import_array(U, "U", False)
    cdef ImportedTensor bt = None
    cdef const TensorView* bias_view = NULL
    if bias is not None:
        bt = import_array(bias, "bias", False)
        bias_view = &bt.view

    cdef string message
    cdef vector[int64_t] shape
    cdef ErrorKind kind = core.output_shape(xt.view, st.view, ut.view, shape, message)
    check(kind, message)

    cdef ImportedTensor ot
    if out is None:
        if type(x) is _numpy_ndarray:  # the common case, without the generic dispatch
            out = _numpy_empty(tuple(shape), dtype=x.dtype)
        else:
            out = _empty_like(x, tuple(shape), core.dtype_name(xt.view.dtype()).decode())
        ot = import_array(out, "out", True)
    else:
        ot = import_array(out, "out", True)
        if ot.read_only:
            raise ValueError("sketched_matmul: out: expected a writable array, got a read-only one")
        if ot.is_copy:
            raise ValueError("sketched_matmul: out: expected the array's own memory, "
                             "got a copy made by its DLPack producer")

    cdef string act = activation.encode("utf-8")
    with nogil:
        kind = core.sketched_matmul(xt.view, st.view, ut.view, ot.view, bias_view, scale_value, act,
                                    dropout_value, seed_value, message)
    check(kind, message)
    return out


def set_num_threads(int num_threads):
    """Sets how many CPU threads sketchcore (its own loops and its BLAS) may use (≥ 1)."""
    cdef string message
    check(core.set_num_threads(num_threads, message), message)


def get_num_threads():
    """Returns the CPU thread count sketchcore uses."""
    return core.get_num_threads()


def build_info():
    """Describes how the native library was built: version, BLAS, CUDA."""
    info = core.build_info()
    return {
        "version": info.version.decode(),
        "blas": info.blas.decode(),
        "cuda": bool(info.cuda),
        "cuda_runtime_version": info.cuda_runtime_version,
    }
