# The DLPack ABI and the consumer (ImportedTensor, borrowing) shared by the bindings; the producer,
# DLPackBuffer, is sketchcore._dlpack_buffer.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

from cpython.buffer cimport Py_buffer

from sketchcore._sketchcore cimport TensorView


cdef extern from "dlpack_abi.h" nogil:
    ctypedef struct DLDevice:
        int32_t device_type
        int32_t device_id

    ctypedef struct DLDataType:
        uint8_t code
        uint8_t bits
        uint16_t lanes

    ctypedef struct DLTensor:
        void* data
        DLDevice device
        int32_t ndim
        DLDataType dtype
        int64_t* shape
        int64_t* strides
        uint64_t byte_offset

    ctypedef struct DLManagedTensor:
        DLTensor dl_tensor
        void* manager_ctx
        void (*deleter)(DLManagedTensor*)

    ctypedef struct DLPackVersion:
        uint32_t major
        uint32_t minor

    ctypedef struct DLManagedTensorVersioned:
        DLPackVersion version
        void* manager_ctx
        void (*deleter)(DLManagedTensorVersioned*)
        uint64_t flags
        DLTensor dl_tensor

    int SC_DLPACK_MAJOR_VERSION
    int SC_DLPACK_MINOR_VERSION
    int SC_DL_CPU
    int SC_DL_CUDA
    int SC_DL_CUDA_HOST
    int SC_DL_CUDA_MANAGED
    int SC_DL_INT
    int SC_DL_UINT
    int SC_DL_FLOAT
    int SC_DL_BFLOAT
    int SC_DL_COMPLEX
    int SC_DL_BOOL
    uint64_t SC_DLPACK_FLAG_READ_ONLY
    uint64_t SC_DLPACK_FLAG_IS_COPIED


cdef class ImportedTensor:
    """An array borrowed through DLPack (the producer's deleter runs once, on release) or, for
    NumPy arrays, through the buffer protocol (released once)."""
    cdef DLManagedTensor* legacy
    cdef DLManagedTensorVersioned* versioned
    cdef Py_buffer buffer
    cdef bint has_buffer
    cdef TensorView view
    cdef readonly bint read_only
    cdef readonly bint is_copy
    cdef readonly str name


cdef ImportedTensor import_array(object obj, str name, bint for_writing, object stream=*)
cdef int torch_device(object obj) except -3
cdef bint is_torch_tensor(object obj) except -1
cdef object torch_current_stream(int device)
cdef enum:
    MAX_BORROWED = 12


cdef struct Borrowed:
    # Tensors borrowed by borrow_torch, whose deleters release_all runs (once each).
    DLManagedTensorVersioned* owners[MAX_BORROWED]
    int count


cdef int borrow_torch(object t, str name, TensorView* view, Borrowed* held, bint fresh=*) except -1
cdef void release_all(Borrowed* held) noexcept
cdef int fresh_view(object t, tuple shape, const TensorView& like, TensorView* view) except -1
cdef int borrow_versioned(object capsule, str name, TensorView* view, DLManagedTensorVersioned** owner) except -1
cdef void release_versioned(DLManagedTensorVersioned* managed) noexcept
