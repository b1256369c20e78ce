# cython: language_level=3
"""DLPack producer: ``DLPackBuffer``, a compact row-major CPU array owned by sketchcore and
exported through DLPack (the consumer side: sketchcore._dlpack)."""
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid, PyCapsule_New
from cpython.ref cimport Py_DECREF, Py_INCREF, PyObject
from libc.stdint cimport int64_t, uintptr_t
from libc.stdlib cimport free, malloc
from libc.string cimport memset
from libcpp.vector cimport vector

from sketchcore._dlpack cimport (DLDataType, DLManagedTensor, DLManagedTensorVersioned, DLTensor,
                                 SC_DL_CPU, SC_DLPACK_MAJOR_VERSION, SC_DLPACK_MINOR_VERSION)

# Capsule names fixed by the DLPack protocol.
cdef const char* LEGACY = b"dltensor"
cdef const char* VERSIONED = b"dltensor_versioned"


cdef struct ExportContext:
    PyObject* owner      # the DLPackBuffer, kept alive while the consumer holds the tensor
    int64_t* shape
    int64_t* strides


cdef void _release_context(ExportContext* ctx) noexcept with gil:
    Py_DECREF(<object>ctx.owner)
    free(ctx.shape)
    free(ctx)


cdef void _delete_versioned(DLManagedTensorVersioned* self) noexcept with gil:
    _release_context(<ExportContext*>self.manager_ctx)
    free(self)


cdef void _delete_legacy(DLManagedTensor* self) noexcept with gil:
    _release_context(<ExportContext*>self.manager_ctx)
    free(self)


cdef void _versioned_capsule_destructor(object capsule) noexcept:
    # An unconsumed capsule still owns its tensor; a consumed one ("used_...") does not.
    if PyCapsule_IsValid(capsule, VERSIONED):
        t = <DLManagedTensorVersioned*>PyCapsule_GetPointer(capsule, VERSIONED)
        t.deleter(t)


cdef void _legacy_capsule_destructor(object capsule) noexcept:
    if PyCapsule_IsValid(capsule, LEGACY):
        t = <DLManagedTensor*>PyCapsule_GetPointer(capsule, LEGACY)
        t.deleter(t)


_DTYPE_CODES = {"float32": (2, 32), "float64": (2, 64)}


cdef class DLPackBuffer:
    """A compact row-major CPU array owned by sketchcore, exported through DLPack.

    Any DLPack consumer can take it without a copy: ``numpy.from_dlpack(buf)``,
    ``torch.from_dlpack(buf)``. The memory lives until the buffer and every exported tensor
    are released. It starts zeroed. Its ``shape`` (tuple of int), ``dtype`` (str) and
    ``data_ptr`` (int, the address of the first element) are read-only.

    Parameters
    ----------
    shape : sequence of int
        Non-negative extents.
    dtype : {"float32", "float64"}
        Element type (default ``"float32"``).

    Raises
    ------
    TypeError
        ``dtype`` is not ``"float32"`` or ``"float64"``.
    ValueError
        A negative extent in ``shape``.
    MemoryError
        The allocation failed.
    BufferError
        From ``__dlpack__``: a ``stream``, a non-CPU ``dl_device`` or ``copy=True``.

    Examples
    --------
    >>> import numpy as np
    >>> buf = DLPackBuffer((2, 3), "float64")
    >>> a = np.from_dlpack(buf)
    >>> a[0, 1] = 5.0
    >>> np.from_dlpack(buf)
    array([[0., 5., 0.],
           [0., 0., 0.]])
    >>> buf.shape, buf.dtype
    ((2, 3), 'float64')
    >>> DLPackBuffer((2,), "int8")
    Traceback (most recent call last):
    TypeError: dtype: expected one of ['float32', 'float64'], got 'int8'
    """
    cdef void* data
    cdef vector[int64_t] _shape
    cdef DLDataType _dtype
    cdef readonly str dtype

    def __cinit__(self, shape, dtype="float32"):
        if dtype not in _DTYPE_CODES:
            raise TypeError(f"dtype: expected one of {sorted(_DTYPE_CODES)}, got {dtype!r}")
        code, bits = _DTYPE_CODES[dtype]
        self._dtype.code = code
        self._dtype.bits = bits
        self._dtype.lanes = 1
        self.dtype = dtype
        cdef size_t count = 1
        for extent in shape:
            if extent < 0:
                raise ValueError(f"shape: expected non-negative extents, got {tuple(shape)}")
            self._shape.push_back(extent)
            count *= <size_t>extent
        cdef size_t nbytes = count * (bits // 8)
        self.data = malloc(nbytes if nbytes > 0 else 1)
        if self.data is NULL:
            raise MemoryError(f"DLPackBuffer: could not allocate {nbytes} bytes")
        memset(self.data, 0, nbytes)

    def __dealloc__(self):
        free(self.data)

    @property
    def shape(self):
        return tuple(self._shape)

    @property
    def data_ptr(self):
        return <uintptr_t>self.data

    def __dlpack_device__(self):
        return (SC_DL_CPU, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if stream is not None:
            raise BufferError("stream: expected None for a CPU buffer, got " + repr(stream))
        if dl_device is not None and tuple(dl_device) != (SC_DL_CPU, 0):
            raise BufferError(f"dl_device: this buffer lives on the CPU (1, 0), got {tuple(dl_device)}")
        if copy is True:
            raise BufferError("copy=True is not supported: the buffer is always shared, never copied")
        cdef int ndim = <int>self._shape.size()
        cdef ExportContext* ctx = <ExportContext*>malloc(sizeof(ExportContext))
        if ctx is NULL:
            raise MemoryError("DLPackBuffer.__dlpack__: out of memory")
        ctx.shape = <int64_t*>malloc(2 * (ndim if ndim > 0 else 1) * sizeof(int64_t))
        if ctx.shape is NULL:
            free(ctx)
            raise MemoryError("DLPackBuffer.__dlpack__: out of memory")
        ctx.strides = ctx.shape + ndim
        cdef int64_t running = 1
        cdef int i
        for i in range(ndim - 1, -1, -1):
            ctx.shape[i] = self._shape[i]
            ctx.strides[i] = running
            running *= self._shape[i] if self._shape[i] > 0 else 1
        Py_INCREF(self)
        ctx.owner = <PyObject*>self

        cdef DLTensor* dl
        cdef DLManagedTensorVersioned* v
        cdef DLManagedTensor* legacy
        if max_version is not None and max_version[0] >= 1:
            v = <DLManagedTensorVersioned*>malloc(sizeof(DLManagedTensorVersioned))
            if v is NULL:
                _release_context(ctx)
                raise MemoryError("DLPackBuffer.__dlpack__: out of memory")
            v.version.major = SC_DLPACK_MAJOR_VERSION
            v.version.minor = SC_DLPACK_MINOR_VERSION
            v.manager_ctx = ctx
            v.deleter = _delete_versioned
            v.flags = 0
            dl = &v.dl_tensor
            capsule = PyCapsule_New(v, VERSIONED, _versioned_capsule_destructor)
        else:
            legacy = <DLManagedTensor*>malloc(sizeof(DLManagedTensor))
            if legacy is NULL:
                _release_context(ctx)
                raise MemoryError("DLPackBuffer.__dlpack__: out of memory")
            legacy.manager_ctx = ctx
            legacy.deleter = _delete_legacy
            dl = &legacy.dl_tensor
            capsule = PyCapsule_New(legacy, LEGACY, _legacy_capsule_destructor)
        dl.data = self.data
        dl.device.device_type = SC_DL_CPU
        dl.device.device_id = 0
        dl.ndim = ndim
        dl.dtype = self._dtype
        dl.shape = ctx.shape
        dl.strides = ctx.strides
        dl.byte_offset = 0
        return capsule
