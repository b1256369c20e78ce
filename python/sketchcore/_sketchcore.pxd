# Cython declarations of the public C++ API (src/cpp/include/sketchcore) and of the small
# bridge (_bridge.hpp) for what Cython cannot express. Every call that can throw is declared
# `except +raise_py_error`: the one handler maps sketchcore's C++ exceptions to Python ones.
from libc.stdint cimport int64_t, uint8_t, uint64_t, uintptr_t
from libcpp cimport bool as cbool
from libcpp.memory cimport unique_ptr
from libcpp.optional cimport optional
from libcpp.string cimport string
from libcpp.vector cimport vector


cdef extern from "_bridge.hpp" namespace "sketchcore_python":
    cdef void raise_py_error() except *


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
        int64_t numel()
        const Device& device()

    const char* dtype_name(DType dtype)

    # epilogue.hpp
    cdef enum class Activation:
        pass
    const char* activation_name(Activation activation)
    vector[Activation] all_activations() except +raise_py_error
    Activation parse_activation(const string& name) except +raise_py_error  # takes a string_view

    cdef cppclass Epilogue:
        double scale
        optional[TensorView] bias
        Activation activation
        double dropout_p
        uint64_t seed
        Activation inner_activation

    # sketched_matmul.hpp
    cdef cppclass TermRange:
        int64_t begin
        int64_t end

    cdef cppclass SketchedMatmulGradients:
        optional[TensorView] x
        optional[TensorView] S
        optional[TensorView] U
        optional[TensorView] bias
        TermRange S_terms
        TermRange U_terms

    vector[int64_t] sketched_matmul_output_shape(const TensorView& x, const TensorView& S,
                                                 const TensorView& U) except +raise_py_error
    void sketched_matmul(const TensorView& x, const TensorView& S, const TensorView& U, const TensorView& out,
                         const Epilogue& epilogue) except +raise_py_error
    void sketched_matmul(const TensorView& x, const TensorView& S, const TensorView& U, const TensorView& out,
                         const Epilogue& epilogue, const TensorView& intermediate) except +raise_py_error
    void sketched_matmul_backward(const TensorView& grad_out, const TensorView& x, const TensorView& S,
                                  const TensorView& U, const TensorView& intermediate, const Epilogue& epilogue,
                                  const SketchedMatmulGradients& grads) except +raise_py_error

    # quantized.hpp
    cdef enum class QuantFormat:
        int8 "sketchcore::QuantFormat::int8"
        fp8_e4m3 "sketchcore::QuantFormat::fp8_e4m3"

    cdef cppclass QuantizedFactor:
        int64_t rows()
        int64_t cols()
        int64_t nbytes()
        void unpack_codes(uint8_t* codes)
        const float* scales()

    unique_ptr[QuantizedFactor] make_quantized_factor(QuantFormat format, const uint8_t* codes, int64_t rows,
                                                      int64_t cols, int64_t row_stride, int64_t col_stride,
                                                      const float* scale) except +raise_py_error
    vector[int64_t] quantized_sketched_matmul_output_shape(const TensorView& x, const QuantizedFactor& S,
                                                           const QuantizedFactor& U) except +raise_py_error
    void quantized_sketched_matmul(const TensorView& x, const QuantizedFactor& S, const QuantizedFactor& U,
                                   const TensorView& out, const Epilogue& epilogue) except +raise_py_error
    vector[int64_t] quantized_matmul_output_shape(const TensorView& x, const QuantizedFactor& W) except +raise_py_error
    void quantized_matmul(const TensorView& x, const QuantizedFactor& W, const TensorView& out,
                          const Epilogue& epilogue) except +raise_py_error

    # int8_matmul.hpp
    cdef cppclass Int8Factor(QuantizedFactor):
        pass

    string int8_gemm_isa() except +raise_py_error
    void set_int8_gemm_isa(const string& name) except +raise_py_error
    cbool int8_gemm_isa_supported(const string& name) except +raise_py_error
    double int8_peak_macs_per_second(const string& name, int64_t iterations) except +raise_py_error
    vector[double] int8_gemm_seconds_for_bench(const float* x, int64_t rows, const Int8Factor& factor, float* out,
                                               int64_t repeats) except +raise_py_error nogil

    # fp8_matmul.hpp
    uint8_t float_to_e4m3(float value) nogil
    float e4m3_to_float(uint8_t code) nogil

    # performer.hpp
    cdef enum class PerformerKernel:
        softmax
        relu

    cdef cppclass PerformerOptions:
        PerformerKernel kernel
        cbool causal

    cdef cppclass PerformerGradients:
        optional[TensorView] q
        optional[TensorView] k
        optional[TensorView] v

    void performer_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                             const TensorView& features, const TensorView& out, const PerformerOptions& options,
                             const optional[TensorView]& key_weights,
                             const optional[TensorView]& value_weights) except +raise_py_error
    void performer_attention_backward(const TensorView& grad_out, const TensorView& q, const TensorView& k,
                                      const TensorView& v, const TensorView& features, const TensorView& out,
                                      const PerformerOptions& options, const optional[TensorView]& key_weights,
                                      const optional[TensorView]& value_weights,
                                      const PerformerGradients& grads) except +raise_py_error

    # sketch.hpp
    cdef enum class SketchKind:
        pass
    cdef enum class Side:
        left
        right
    SketchKind parse_sketch_kind(const string& name) except +raise_py_error  # takes a string_view

    cdef cppclass SketchOperator:
        SketchKind kind
        int64_t rows
        int64_t cols
        uint64_t seed
        int64_t nnz
        cbool scaled

    void validate_sketch(const SketchOperator& op) except +raise_py_error
    void sketch_to_dense(const SketchOperator& op, const TensorView& out, int64_t row0,
                         int64_t col0) except +raise_py_error
    vector[int64_t] sketch_apply_output_shape(const SketchOperator& op, const TensorView& a, Side side,
                                              cbool transpose) except +raise_py_error
    void sketch_apply(const SketchOperator& op, const TensorView& a, const TensorView& out, Side side,
                      cbool transpose) except +raise_py_error

    # runtime.hpp
    cdef cppclass BuildInfo:
        string version
        string blas
        cbool cuda
        int cuda_runtime_version
        cbool cpu_bf16_gemm
        cbool cpu_bf16_amx
        string cpu_activation_kernels

    BuildInfo build_info() except +raise_py_error
    void set_num_threads(int num_threads) except +raise_py_error
    int get_num_threads()
    int cuda_device_count()

    # gated_paths.hpp
    cdef enum class GatedPath:
        cuda_padded_inner_width
        cuda_performer_kernels
        jax_cuda_handlers
        cuda_inner_activation
        cuda_int8_factors
        cuda_fp8_factors

    cdef cppclass GatedPathInfo:
        GatedPath path
        string name
        string description
        cbool enabled
        cbool overridden

    vector[GatedPathInfo] gated_paths() except +raise_py_error
    cbool gated_path_enabled(GatedPath path) except +raise_py_error
    GatedPath gated_path_from_name(const string& name) except +raise_py_error  # takes a string_view
    void set_gated_path_enabled(GatedPath path, optional[cbool] enabled)
    optional[cbool] gated_path_override(GatedPath path)
    void require_gated_path(GatedPath path, const string& operation) except +raise_py_error  # a string_view
    int64_t cuda_inner_width(int64_t rank, DType dtype) except +raise_py_error

    # memory.hpp
    cdef cppclass MemoryStats:
        size_t current_bytes
        size_t peak_bytes
        size_t reserved_bytes
        size_t num_allocs
        size_t num_cache_hits
        size_t limit_bytes

    cdef cppclass CachingHostPool:
        MemoryStats stats() except +raise_py_error
        void reset_peak()
        void empty_cache()
        void set_limit(optional[size_t] limit)

    CachingHostPool& default_host_pool() except +raise_py_error
    MemoryStats device_memory_stats(int device) except +raise_py_error
    void device_reset_peak(int device) except +raise_py_error
    void device_empty_cache(int device) except +raise_py_error


cdef extern from "sketchcore/execution.hpp" namespace "sketchcore" nogil:
    cdef cppclass CpuGemmProvider:
        void* sgemm
        void* dgemm
        int index_bits
        void* gomp_parallel


cdef extern from "_bridge.hpp" namespace "sketchcore_python" nogil:
    void set_thread_execution(uintptr_t stream, cbool allow_tf32, const CpuGemmProvider* cpu_gemm,
                              cbool tune_gemms)
    CpuGemmProvider& framework_gemm(int framework)
    TensorView view_of(void* data, DType dtype, const int64_t* shape, const int64_t* strides, int ndim,
                       Device device) except +raise_py_error
    cbool join_views(const TensorView& a, const TensorView& b, TensorView& joined) except +raise_py_error
    ctypedef void* (*DeviceAllocateCallback)(void* owner, size_t nbytes, int device, uintptr_t stream, string* error)
    ctypedef void (*DeviceDeallocateCallback)(void* owner, void* block, size_t nbytes, int device, uintptr_t stream)
    void set_callback_device_resource(void* owner, DeviceAllocateCallback allocate,
                                      DeviceDeallocateCallback deallocate)
    uintptr_t device_resource_allocate(size_t nbytes, int device, uintptr_t stream) except +raise_py_error
    void device_resource_deallocate(uintptr_t block, size_t nbytes, int device,
                                    uintptr_t stream) except +raise_py_error
