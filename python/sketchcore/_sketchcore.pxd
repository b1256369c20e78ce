# Cython declarations of the public C++ API (src/cpp/include/sketchcore) and of the
# exception-free bridge the bindings call through.
from libc.stdint cimport int64_t, uint64_t, uintptr_t
from libcpp cimport bool as cbool
from libcpp.string cimport string
from libcpp.vector cimport vector


cdef extern from "sketchcore/sketchcore.hpp" namespace "sketchcore" nogil:
    cdef enum class DType:
        float16
        bfloat16
        float32
        float64

    cdef enum class DeviceType:
        cpu
        cuda

    cdef cppclass Device:
        DeviceType type
        int index

    cdef cppclass TensorView:
        TensorView()
        TensorView(void* data, DType dtype, vector[int64_t] shape, vector[int64_t] strides, Device device) except +
        void* data()
        DType dtype()
        int ndim()
        const vector[int64_t]& shape()

    cdef cppclass BuildInfo:
        string version
        string blas
        cbool cuda
        int cuda_runtime_version

    const char* dtype_name(DType dtype)
    BuildInfo build_info() except +
    int get_num_threads()

    cdef cppclass MemoryStats:
        size_t current_bytes
        size_t peak_bytes
        size_t reserved_bytes
        size_t num_allocs
        size_t num_cache_hits
        size_t limit_bytes

    cdef cppclass CachingHostPool:
        MemoryStats stats() except +
        void reset_peak()
        void empty_cache()

    CachingHostPool& default_host_pool() except +


cdef extern from "_bridge.hpp" namespace "sketchcore_python" nogil:
    cdef enum class ErrorKind:
        none
        value
        type
        memory
        runtime

    ErrorKind output_shape(const TensorView& x, const TensorView& S, const TensorView& U,
                           vector[int64_t]& shape, string& message)
    ErrorKind sketched_matmul(const TensorView& x, const TensorView& S, const TensorView& U,
                              const TensorView& out, const TensorView* bias, double scale,
                              const string& activation, double dropout_p, uint64_t seed, string& message)
    ErrorKind host_pool_set_limit(bint has_limit, size_t limit, string& message)
    void set_thread_execution(uintptr_t stream, bint allow_tf32)
    int cuda_device_count()
    ErrorKind device_memory_stats(int device, MemoryStats& stats, string& message)
    ErrorKind device_reset_peak(int device, string& message)
    ErrorKind device_empty_cache(int device, string& message)
    ctypedef void* (*DeviceAllocateCallback)(void* owner, size_t nbytes, int device, uintptr_t stream, string* error)
    ctypedef void (*DeviceDeallocateCallback)(void* owner, void* block, size_t nbytes, int device, uintptr_t stream)
    void set_callback_device_resource(void* owner, DeviceAllocateCallback allocate,
                                      DeviceDeallocateCallback deallocate)
    ErrorKind device_resource_allocate(size_t nbytes, int device, uintptr_t stream, uintptr_t& block,
                                       string& message)
    ErrorKind device_resource_deallocate(uintptr_t block, size_t nbytes, int device, uintptr_t stream,
                                         string& message)
    ErrorKind sketched_matmul_saving(const TensorView& x, const TensorView& S, const TensorView& U,
                                     const TensorView& out, const TensorView* bias, double scale,
                                     const string& activation, double dropout_p, uint64_t seed,
                                     const TensorView& intermediate, string& message)
    ErrorKind sketched_matmul_backward(const TensorView& grad_out, const TensorView& x, const TensorView& S,
                                       const TensorView& U, const TensorView& intermediate, const TensorView* bias,
                                       double scale, const string& activation, double dropout_p, uint64_t seed,
                                       const TensorView* dx, const TensorView* dS, const TensorView* dU,
                                       const TensorView* dbias, int64_t s_begin, int64_t s_end,
                                       int64_t u_begin, int64_t u_end, string& message)
    ErrorKind set_num_threads(int n, string& message)
    ErrorKind sketch_validate(const string& kind, int64_t m, int64_t n, uint64_t seed, int64_t nnz, bint scaled,
                              string& message)
    ErrorKind sketch_to_dense(const string& kind, int64_t m, int64_t n, uint64_t seed, int64_t nnz, bint scaled,
                              const TensorView& out, int64_t row0, int64_t col0, string& message)
    ErrorKind sketch_output_shape(const string& kind, int64_t m, int64_t n, uint64_t seed, int64_t nnz,
                                  bint scaled, const TensorView& a, bint right, bint transpose,
                                  vector[int64_t]& shape, string& message)
    ErrorKind sketch_apply(const string& kind, int64_t m, int64_t n, uint64_t seed, int64_t nnz, bint scaled,
                           const TensorView& a, const TensorView& out, bint right, bint transpose,
                           string& message)
