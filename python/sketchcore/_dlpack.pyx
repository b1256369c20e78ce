# cython: language_level=3
"""DLPack consumer.

``import_array`` turns any object with ``__dlpack__`` (NumPy, PyTorch, CuPy, JAX, ...) into
an :class:`ImportedTensor` holding a ``sketchcore::TensorView`` of the same memory, without a
copy. The producer, ``DLPackBuffer`` (memory owned by sketchcore, exported through DLPack),
is in sketchcore._dlpack_buffer.
"""
import sys

cimport cython

from sketchcore import _framework

from cpython.pycapsule cimport (PyCapsule_GetName, PyCapsule_GetPointer, PyCapsule_IsValid,
                                PyCapsule_New, PyCapsule_SetName)
from cpython.buffer cimport PyBUF_FORMAT, PyBUF_STRIDES, PyBuffer_Release, PyObject_GetBuffer
from cpython.ref cimport Py_DECREF, Py_INCREF, PyObject
from libc.stdint cimport int64_t, uintptr_t
from libc.stdlib cimport free, malloc
from libc.string cimport memset, strcmp
from libcpp.vector cimport vector

from sketchcore._sketchcore cimport DType, Device, DeviceType, TensorView, view_of

# Capsule names fixed by the DLPack protocol; the "used_" names mark a consumed capsule.
cdef const char* LEGACY = b"dltensor"
cdef const char* LEGACY_USED = b"used_dltensor"
cdef const char* VERSIONED = b"dltensor_versioned"
cdef const char* VERSIONED_USED = b"used_dltensor_versioned"

_DLPACK_MAX_VERSION = (1, 1)

_DTYPE_FAMILIES = {0: "int", 1: "uint", 2: "float", 3: "opaque", 4: "bfloat", 5: "complex", 6: "bool"}


def _describe_dtype(int code, int bits, int lanes):
    family = _DTYPE_FAMILIES.get(code, f"code{code}-")
    text = "bool" if code == 6 else f"{family}{bits}"
    return text if lanes == 1 else f"{text}x{lanes}"


cdef DType _to_dtype(DLDataType t, str name) except *:
    if t.lanes == 1:
        if t.code == SC_DL_FLOAT:
            if t.bits == 32:
                return DType.float32
            if t.bits == 64:
                return DType.float64
            if t.bits == 16:
                return DType.float16
        elif t.code == SC_DL_BFLOAT and t.bits == 16:
            return DType.bfloat16
    raise TypeError(f"{name}: expected a floating-point array (float16, bfloat16, float32 or float64), "
                    f"got dtype {_describe_dtype(t.code, t.bits, t.lanes)}")


cdef Device _to_device(DLDevice d, str name) except *:
    cdef Device device
    if d.device_type == SC_DL_CPU or d.device_type == SC_DL_CUDA_HOST:
        device.type = DeviceType.cpu
        device.index = 0
    elif d.device_type == SC_DL_CUDA or d.device_type == SC_DL_CUDA_MANAGED:
        device.type = DeviceType.cuda
        device.index = d.device_id
    else:
        raise TypeError(f"{name}: expected an array on the CPU or a CUDA device, "
                        f"got DLPack device type {d.device_type}")
    return device


@cython.freelist(16)  # a call borrows up to ten: no allocation per operand once warm
cdef class ImportedTensor:
    def __dealloc__(self):
        # The capsule was renamed to "used_*", so this object is the only owner left:
        # the producer's deleter runs here, exactly once.
        if self.versioned is not NULL:
            if self.versioned.deleter is not NULL:
                self.versioned.deleter(self.versioned)
            self.versioned = NULL
        if self.legacy is not NULL:
            if self.legacy.deleter is not NULL:
                self.legacy.deleter(self.legacy)
            self.legacy = NULL
        if self.has_buffer:
            self.has_buffer = False
            PyBuffer_Release(&self.buffer)

    @property
    def shape(self):
        return tuple(self.view.shape())

    @property
    def data_ptr(self):
        return <uintptr_t>self.view.data()


# torch's exporter without Tensor.__dlpack__'s Python layer, and its current-stream query,
# looked up once torch is imported.
cdef object _torch_tensor_types = None
cdef object _torch_to_dlpack = None
cdef object _torch_raw_stream = None


cdef bint _torch_loaded():
    global _torch_tensor_types, _torch_to_dlpack, _torch_raw_stream
    if _torch_tensor_types is not None:
        return True
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    _torch_to_dlpack = getattr(torch._C, "_to_dlpack_versioned", None)
    _torch_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # 0.2 µs; the public API 3
    _torch_tensor_types = (torch.Tensor, torch.nn.Parameter)
    return True


cdef bint is_torch_tensor(object obj) except -1:
    """Whether `obj` is a plain torch tensor (torch.Tensor or nn.Parameter, no subclass)."""
    if not _torch_loaded():
        return False
    cls = type(obj)
    return cls is _torch_tensor_types[0] or cls is _torch_tensor_types[1]


cdef int torch_device(object obj) except -3:
    """-2 for anything but a plain torch tensor (torch.Tensor or nn.Parameter, no subclass),
    else the tensor's CUDA device index, or -1 when it is not on a CUDA device. Attribute
    reads only: __dlpack_device__ is a Python method costing 2 µs per operand."""
    if not _torch_loaded():
        return -2
    cls = type(obj)
    if cls is not _torch_tensor_types[0] and cls is not _torch_tensor_types[1]:
        return -2
    return obj.get_device() if obj.is_cuda else -1


cdef object torch_current_stream(int device):
    """torch's current stream on CUDA device `device` as a handle (0: the legacy default)."""
    if _torch_raw_stream is not None:
        return int(_torch_raw_stream(device))
    torch = sys.modules["torch"]
    return int(torch.cuda.current_stream(device).cuda_stream)


cdef object _torch_capsule(object obj, object stream):
    """A versioned capsule straight from torch's C++ exporter, or None where Tensor.__dlpack__
    would do more than call it: a tensor subclass, one that requires grad or has the conj or
    neg bit (which __dlpack__ refuses with its own message), or a CUDA tensor whose current
    torch stream is not `stream` (then __dlpack__'s cross-stream handshake is needed).
    __dlpack__ costs about 4 µs per operand on the host (more with a stream), _to_dlpack 0.3:
    a GPU call with five torch operands of ~50 µs of device work was bound by this."""
    if not is_torch_tensor(obj) or _torch_to_dlpack is None:
        return None
    # (The conj bit exists only on complex tensors, which the dtype check refuses by name.)
    if obj.requires_grad or obj.is_neg():
        return None
    cdef int device
    if stream is not None:  # a CUDA call (CPU calls have no stream; the device is checked by the core)
        device = torch_device(obj)
        if device < 0:
            return None
        current = torch_current_stream(device)
        if (current if current != 0 else 1) != stream:  # DLPack spells the legacy stream 1
            return None
    return _torch_to_dlpack(obj)


cdef int _refuse_unexportable_torch(object t, str name) except -1:
    """Raises a TypeError naming `name` for the torch tensors DLPack cannot export (sparse or other
    non-strided layouts, the meta device), whose own messages name no argument ("Cannot access data
    pointer of Tensor that doesn't have storage"); returns 0 for any other cause. Called only after
    an export failed, so the usual call pays nothing for it."""
    layout = str(t.layout)
    if layout != "torch.strided":
        raise TypeError(f"{name}: expected a dense (strided) tensor, got layout {layout}; pass {name}.to_dense()")
    if t.device.type == "meta":
        raise TypeError(f"{name}: expected a tensor with data, got one on the 'meta' device (sketchcore computes on "
                        "data; shapes alone go through the torch operators of sketchcore.torch, whose fake kernels "
                        "torch.compile and meta tensors use)")
    return 0


cdef object _export(object obj, str name, bint for_writing, object stream):
    """Calls obj.__dlpack__, preferring a versioned capsule. `stream` (CUDA arrays only) is
    the consumer's stream in DLPack's convention: the producer makes the data ready on it."""
    try:
        export = obj.__dlpack__
    except AttributeError:
        raise TypeError(f"{name}: expected an array supporting DLPack (numpy.ndarray, torch.Tensor, "
                        f"cupy.ndarray, ...), got {type(obj).__module__}.{type(obj).__qualname__}") from None
    extra = {} if stream is None else {"stream": stream}
    try:
        if for_writing:
            # copy=False: a producer that would have to copy must refuse instead.
            return export(max_version=_DLPACK_MAX_VERSION, copy=False, **extra)
        return export(max_version=_DLPACK_MAX_VERSION, **extra)
    except TypeError:
        # A producer from before DLPack 1.0 knows no max_version/copy: legacy capsule.
        return export(**extra)
    except BufferError:
        if getattr(obj, "requires_grad", False) is True:  # torch's own message names no argument
            raise BufferError(
                f"{name}: expected a tensor that does not require gradient: sketchcore's array functions take "
                "arrays, not autograd graphs (torch refuses to export tensors that require gradient). For a "
                "differentiable call use sketchcore.torch.sketched_linear(x, S, U, bias) (or "
                f"sketchcore.torch.sklinear); to compute without gradients pass {name}.detach()") from None
        raise


cdef object _ndarray = None  # numpy.ndarray, once NumPy is imported


cdef ImportedTensor _import_ndarray(object obj, str name):
    """A NumPy array of float16/32/64 with element-multiple strides, borrowed through the
    buffer protocol: the C-level exporter NumPy offers, a third of a DLPack export's host
    time (no capsule, no method call, no deleter); None for anything else, which then goes
    through DLPack and its messages."""
    cdef ImportedTensor t = ImportedTensor.__new__(ImportedTensor)
    PyObject_GetBuffer(obj, &t.buffer, PyBUF_STRIDES | PyBUF_FORMAT)
    t.has_buffer = True
    cdef DType dtype
    cdef bytes fmt = t.buffer.format
    if fmt == b"f" and t.buffer.itemsize == 4:
        dtype = DType.float32
    elif fmt == b"d" and t.buffer.itemsize == 8:
        dtype = DType.float64
    elif fmt == b"e" and t.buffer.itemsize == 2:
        dtype = DType.float16
    else:
        return None
    cdef vector[int64_t] strides
    cdef int i
    strides.reserve(t.buffer.ndim)
    for i in range(t.buffer.ndim):
        if t.buffer.strides[i] % t.buffer.itemsize != 0:
            return None
        strides.push_back(t.buffer.strides[i] // t.buffer.itemsize)
    cdef Device cpu
    t.view = view_of(t.buffer.buf, dtype, <int64_t*>t.buffer.shape, strides.data(), t.buffer.ndim, cpu)
    t.name = name
    t.read_only = t.buffer.readonly
    return t


cdef ImportedTensor import_array(object obj, str name, bint for_writing, object stream=None):
    """Borrows `obj` through DLPack (NumPy arrays through the buffer protocol). `name` is the
    argument name used in error messages; `stream` is passed to a CUDA array's ``__dlpack__``
    (None for CPU arrays)."""
    global _ndarray
    cdef ImportedTensor imported
    if _ndarray is None and "numpy" in sys.modules:
        _ndarray = sys.modules["numpy"].ndarray
    if type(obj) is _ndarray:
        try:
            imported = _import_ndarray(obj, name)
        except (BufferError, ValueError, TypeError):  # DLPack reports it, with the argument's name
            imported = None
        if imported is not None:
            return imported
    try:
        capsule = _torch_capsule(obj, stream)
        if capsule is None:
            capsule = _export(obj, name, for_writing, stream)
    except (RuntimeError, BufferError):
        if is_torch_tensor(obj):
            _refuse_unexportable_torch(obj, name)
        raise
    cdef ImportedTensor t = ImportedTensor.__new__(ImportedTensor)
    t.name = name
    cdef DLTensor* dl
    if PyCapsule_IsValid(capsule, VERSIONED):
        t.versioned = <DLManagedTensorVersioned*>PyCapsule_GetPointer(capsule, VERSIONED)
        PyCapsule_SetName(capsule, VERSIONED_USED)
        if t.versioned.version.major > SC_DLPACK_MAJOR_VERSION:
            raise BufferError(f"{name}: expected DLPack major version ≤ {SC_DLPACK_MAJOR_VERSION}, "
                              f"got {t.versioned.version.major}.{t.versioned.version.minor}")
        t.read_only = (t.versioned.flags & SC_DLPACK_FLAG_READ_ONLY) != 0
        t.is_copy = (t.versioned.flags & SC_DLPACK_FLAG_IS_COPIED) != 0
        dl = &t.versioned.dl_tensor
    elif PyCapsule_IsValid(capsule, LEGACY):
        t.legacy = <DLManagedTensor*>PyCapsule_GetPointer(capsule, LEGACY)
        PyCapsule_SetName(capsule, LEGACY_USED)
        dl = &t.legacy.dl_tensor
    else:
        raise TypeError(f"{name}: __dlpack__ returned {type(capsule).__name__}, "
                        f"expected an unconsumed 'dltensor' or 'dltensor_versioned' capsule")

    cdef DType dtype = _to_dtype(dl.dtype, name)
    cdef Device device = _to_device(dl.device, name)
    try:
        t.view = view_of(<char*>dl.data + dl.byte_offset, dtype, dl.shape, dl.strides, dl.ndim, device)
    except ValueError as e:  # extents whose products overflow 64 bits
        raise ValueError(f"{name}: {e}") from None
    return t


cdef int borrow_versioned(object capsule, str name, TensorView* view,
                          DLManagedTensorVersioned** owner) except -1:
    """The lean consumer of the torch adapters' call path (sketchcore._fastcall): fills `view`
    from an unconsumed versioned capsule of torch's C exporter and hands its tensor to
    `*owner`, whose deleter the caller runs exactly once (release_versioned). No
    ImportedTensor, no intermediate vectors: a tiny layer's call borrows eight tensors."""
    if not PyCapsule_IsValid(capsule, VERSIONED):
        raise TypeError(f"{name}: expected an unconsumed 'dltensor_versioned' capsule")
    cdef DLManagedTensorVersioned* managed = <DLManagedTensorVersioned*>PyCapsule_GetPointer(capsule, VERSIONED)
    PyCapsule_SetName(capsule, VERSIONED_USED)
    owner[0] = managed
    cdef DLTensor* dl = &managed.dl_tensor
    try:
        view[0] = view_of(<char*>dl.data + dl.byte_offset, _to_dtype(dl.dtype, name), dl.shape, dl.strides,
                          dl.ndim, _to_device(dl.device, name))
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None
    return 0


cdef void release_versioned(DLManagedTensorVersioned* managed) noexcept:
    if managed is not NULL and managed.deleter is not NULL:
        managed.deleter(managed)


cdef int borrow_torch(object t, str name, TensorView* view, Borrowed* held, bint fresh=False) except -1:
    """Borrows the plain torch tensor `t` (torch.Tensor or nn.Parameter, any device, whether
    or not it requires gradient) into `view` through torch's C exporter; its deleter runs in
    release_all. For the callers that have checked what __dlpack__ would (sketchcore._fastcall,
    and _ops for tensors without gradient): no CUDA stream handshake, as every operand of a
    call is on the call's device, whose current torch stream the call runs on (an operand on
    another device is refused by the core). `fresh`: a tensor the caller just allocated with
    new_empty (plain, no neg bit: nothing to check)."""
    if fresh:
        pass
    elif not is_torch_tensor(t):
        raise TypeError(f"{name}: expected a torch.Tensor or nn.Parameter, got {type(t).__module__}."
                        f"{type(t).__qualname__}")
    elif t.is_neg():  # a lazily negated view (torch._neg_view): DLPack would hand over the unnegated memory
        t = t.resolve_neg()
    try:
        capsule = (_torch_to_dlpack(t) if _torch_to_dlpack is not None
                   else t.detach().__dlpack__(max_version=_DLPACK_MAX_VERSION))
    except (RuntimeError, BufferError):
        _refuse_unexportable_torch(t, name)
        raise
    if held.count == MAX_BORROWED:
        raise RuntimeError("borrow_torch: too many operands")
    held.owners[held.count] = NULL
    held.count += 1
    borrow_versioned(capsule, name, view, &held.owners[held.count - 1])
    return 0


cdef int fresh_view(object t, tuple shape, const TensorView& like, TensorView* view) except -1:
    """The view of `t`, a tensor of `shape` that the caller has just allocated with
    ``like_tensor.new_empty(*shape)`` (compact row-major, `like`'s dtype and device): read from
    its data pointer, without an export (a third of a tiny call's output cost)."""
    cdef vector[int64_t] extents = shape
    cdef vector[int64_t] strides
    view[0] = TensorView(<void*><uintptr_t>t.data_ptr(), like.dtype(), extents, strides, like.device())
    return 0


cdef void release_all(Borrowed* held) noexcept:
    cdef int i
    for i in range(held.count):
        release_versioned(held.owners[i])
    held.count = 0


def borrow(obj, name="array", writable=False):
    """Imports `obj` through DLPack and returns the :class:`ImportedTensor` (for testing)."""
    return import_array(obj, name, writable)

