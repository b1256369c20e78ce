"""A DLPack producer built with ctypes, to feed the consumer capsules that NumPy would
never make: legacy or versioned, any byte_offset, NULL strides, any flags, device, dtype
or version, and a deleter that counts its calls."""
import ctypes

import numpy as np

c_int64_p = ctypes.POINTER(ctypes.c_int64)


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", c_int64_p),
        ("strides", c_int64_p),
        ("byte_offset", ctypes.c_uint64),
    ]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", DELETER),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


# A prototype of our own: ctypes.pythonapi.PyCapsule_New is one shared object whose argtypes
# other code changes (jax.ffi.pycapsule sets a destructor type), which broke these tests when
# sketchcore.jax had been imported first.
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi))

READ_ONLY = 1
IS_COPIED = 2
_DTYPES = {np.dtype(np.float32): (2, 32), np.dtype(np.float64): (2, 64)}


class FakeProducer:
    """Exports `array` (a NumPy array, possibly a view) through a hand-built capsule.

    byte_offset_elements: report data = array start − offset and byte_offset = offset·itemsize
    (the array must have that many elements before it in its base buffer).
    shape, strides: report these (strides in elements) instead of the array's own, e.g.
    extents no NumPy array can have.
    ndim: report this number of dimensions (e.g. a negative one) instead of len(shape).
    """

    def __init__(self, array, *, versioned=True, flags=0, byte_offset_elements=0, null_strides=False,
                 device=(1, 0), dtype_code=None, major=1, accepts_keywords=True, shape=None, strides=None,
                 ndim=None):
        self.array = array
        self.shape = tuple(array.shape) if shape is None else tuple(shape)
        self.strides = tuple(s // array.itemsize for s in array.strides) if strides is None else tuple(strides)
        self.versioned = versioned
        self.flags = flags
        self.offset = byte_offset_elements * array.itemsize
        self.null_strides = null_strides
        self.device = device
        self.dtype_code = dtype_code or _DTYPES[array.dtype]
        self.major = major
        self.accepts_keywords = accepts_keywords
        self.ndim = ndim
        self.deleted = 0
        self.calls = []
        self._keep = []

    def _deleter(self, _pointer):
        self.deleted += 1

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, **kwargs):
        if not self.accepts_keywords and kwargs:
            raise TypeError("__dlpack__() takes no keyword arguments")
        self.calls.append(kwargs)
        a = self.array
        ndim = len(self.shape)
        shape = (ctypes.c_int64 * ndim)(*self.shape)
        strides = (ctypes.c_int64 * ndim)(*self.strides)
        deleter = DELETER(self._deleter)
        managed = DLManagedTensorVersioned() if self.versioned else DLManagedTensor()
        t = managed.dl_tensor
        t.data = a.__array_interface__["data"][0] - self.offset
        t.byte_offset = self.offset
        t.device = DLDevice(*self.device)
        t.ndim = ndim if self.ndim is None else self.ndim
        t.dtype = DLDataType(self.dtype_code[0], self.dtype_code[1], 1)
        t.shape = ctypes.cast(shape, c_int64_p)
        t.strides = None if self.null_strides else ctypes.cast(strides, c_int64_p)
        managed.deleter = deleter
        name = b"dltensor"
        if self.versioned:
            managed.version = DLPackVersion(self.major, 0)
            managed.flags = self.flags
            name = b"dltensor_versioned"
        self._keep.append((shape, strides, deleter, managed, name))
        return _capsule_new(ctypes.addressof(managed), name, None)
