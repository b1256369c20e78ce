/** @file sketchcore.h
 *  @brief The C ABI of sketchcore: C99, opaque handles, error codes (for Rust, Go, C#, Julia, C).
 *
 *  Every function returns a ::sketchcore_status (0 = success). On failure,
 *  sketchcore_last_error() returns the calling thread's message, in the C++ API's format
 *  `operation: argument: expected …, got …`. No C++ exception ever crosses this boundary.
 *  Arrays are described by ::sketchcore_tensor (pointer, dtype code, rank, extents, optional
 *  strides), which the library never owns or frees. The header is self-contained (only
 *  `<stdint.h>`), so binding generators (bindgen, cgo, ClangSharp, Clang.jl) can read it alone.
 *  Link against the CMake target `sketchcore::c` (`find_package(sketchcore)`); the symbols live
 *  in libsketchcore.
 */
#ifndef SKETCHCORE_SKETCHCORE_H
#define SKETCHCORE_SKETCHCORE_H

#include <stdint.h>

/** Marks a declaration as exported by libsketchcore (the C equivalent of export.hpp's macro). */
#if defined(SKETCHCORE_STATIC)
#define SKETCHCORE_C_API
#elif defined(_WIN32)
#if defined(SKETCHCORE_BUILDING_LIBRARY)
#define SKETCHCORE_C_API __declspec(dllexport)
#else
#define SKETCHCORE_C_API __declspec(dllimport)
#endif
#else
#define SKETCHCORE_C_API __attribute__((visibility("default")))
#endif

/** Version of this C ABI: raised only when a declaration changes incompatibly. */
#define SKETCHCORE_C_ABI_VERSION 1

#ifdef __cplusplus
extern "C" {
#endif

/** Result of every call (the type is `int32_t`-sized; new codes may be added at the end). */
typedef enum sketchcore_status {
  SKETCHCORE_OK = 0,                        /**< success */
  SKETCHCORE_ERROR_INVALID_ARGUMENT = 1,    /**< a value out of range (a name, a probability, a scale) */
  SKETCHCORE_ERROR_NULL_POINTER = 2,        /**< a required pointer was NULL */
  SKETCHCORE_ERROR_SHAPE = 3,               /**< a rank, an extent or a layout does not fit (C++ shape_error) */
  SKETCHCORE_ERROR_DTYPE = 4,               /**< an unknown or unsupported dtype code (C++ dtype_error) */
  SKETCHCORE_ERROR_DEVICE = 5,              /**< an unsupported or mismatching device (C++ device_error) */
  SKETCHCORE_ERROR_OUT_OF_MEMORY = 6,       /**< an allocation failed or a memory limit was reached */
  SKETCHCORE_ERROR_CUDA = 7,                /**< a CUDA call failed (C++ cuda_error) */
  SKETCHCORE_ERROR_UNVERIFIED_PATH = 8,     /**< a gated, not yet device-verified path (C++ unverified_path_error) */
  SKETCHCORE_ERROR_INTERNAL = 9             /**< any other failure inside the library */
} sketchcore_status;

/** Element type codes of ::sketchcore_tensor::dtype. */
typedef enum sketchcore_dtype {
  SKETCHCORE_FLOAT16 = 0,   /**< IEEE binary16, passed as raw 16-bit values */
  SKETCHCORE_BFLOAT16 = 1,  /**< bfloat16, passed as raw 16-bit values */
  SKETCHCORE_FLOAT32 = 2,   /**< IEEE binary32 (`float`) */
  SKETCHCORE_FLOAT64 = 3,   /**< IEEE binary64 (`double`) */
  SKETCHCORE_INT8 = 4       /**< `int8_t`: only the int8 factor values take it */
} sketchcore_dtype;

/** Device type codes of ::sketchcore_tensor::device_type. */
typedef enum sketchcore_device_type {
  SKETCHCORE_CPU = 0,  /**< host memory */
  SKETCHCORE_CUDA = 1  /**< CUDA device memory (work runs on the legacy default stream) */
} sketchcore_device_type;

/** Activation codes, as the C++ `sketchcore::Activation`. */
typedef enum sketchcore_activation {
  SKETCHCORE_ACT_NONE = 0,       /**< identity */
  SKETCHCORE_ACT_RELU = 1,       /**< max(z, 0) */
  SKETCHCORE_ACT_GELU = 2,       /**< exact GELU, z·Φ(z) */
  SKETCHCORE_ACT_GELU_TANH = 3,  /**< GELU's tanh approximation */
  SKETCHCORE_ACT_SILU = 4        /**< z / (1 + e^(−z)) */
} sketchcore_activation;

/** Sketch kind codes, as the C++ `sketchcore::SketchKind` (see sketch.hpp for the entries). */
typedef enum sketchcore_sketch_kind {
  SKETCHCORE_SKETCH_GAUSSIAN = 0,     /**< N(0, 1/m) entries */
  SKETCHCORE_SKETCH_RADEMACHER = 1,   /**< ±1/√m entries */
  SKETCHCORE_SKETCH_UNIFORM = 2,      /**< U(−√(3/m), √(3/m)) entries */
  SKETCHCORE_SKETCH_SPARSE_SIGN = 3,  /**< nnz entries ±1/√nnz per column */
  SKETCHCORE_SKETCH_COUNTSKETCH = 4,  /**< one ±1 per column */
  SKETCHCORE_SKETCH_SRHT = 5          /**< subsampled randomized Hadamard transform */
} sketchcore_sketch_kind;

/** A non-owning view of a strided array (as DLPack): element (i0, …) is at
 *  `data + Σ i_d · strides[d]` elements. The caller keeps `data`, `shape` and `strides` alive
 *  during the call; the library keeps no pointer to them afterwards. */
typedef struct sketchcore_tensor {
  void* data;              /**< element (0, …, 0); may be NULL only when the tensor has no elements */
  int32_t dtype;           /**< a ::sketchcore_dtype code */
  int32_t ndim;            /**< rank, 0 to ::SKETCHCORE_MAX_NDIM */
  const int64_t* shape;    /**< `ndim` extents, each ≥ 0 (may be NULL when ndim is 0) */
  const int64_t* strides;  /**< `ndim` element strides (any sign), or NULL for compact row-major */
  int32_t device_type;     /**< a ::sketchcore_device_type code */
  int32_t device_index;    /**< device ordinal (0 for the CPU) */
} sketchcore_tensor;

/** Largest rank a ::sketchcore_tensor may have. */
#define SKETCHCORE_MAX_NDIM 32

/** The element-wise epilogue: `y = dropout(act(scale · z + bias), p, seed)`, with the inner
 *  activation σ applied to the intermediate x·S (see epilogue.hpp). Fill it with
 *  sketchcore_epilogue_init(); a NULL epilogue pointer means those defaults. */
typedef struct sketchcore_epilogue {
  double scale;                   /**< multiplies the product (default 1) */
  const sketchcore_tensor* bias;  /**< 1-D, length d_out, any stride; NULL = no bias */
  int32_t activation;             /**< a ::sketchcore_activation code applied after scale and bias */
  int32_t inner_activation;       /**< a ::sketchcore_activation code σ on x·S (default none) */
  double dropout_p;               /**< dropout probability in [0, 1] (default 0) */
  uint64_t seed;                  /**< dropout seed (default 0) */
} sketchcore_epilogue;

/** A packed int8 matrix with one float32 scale per column (C++ `Int8Factor`); opaque. */
typedef struct sketchcore_int8_factor sketchcore_int8_factor;

/** A counter-based sketching operator (C++ `SketchOperator`); opaque. */
typedef struct sketchcore_sketch sketchcore_sketch;

/** How this libsketchcore was built (strings owned by the library, valid until it is unloaded). */
typedef struct sketchcore_build_info {
  const char* version;                 /**< the library's whole version string, e.g. "0.1.0" */
  int32_t version_major;               /**< major version of the library */
  int32_t version_minor;               /**< minor version of the library */
  int32_t version_patch;               /**< patch version of the library */
  int32_t c_abi_version;               /**< the library's ::SKETCHCORE_C_ABI_VERSION */
  const char* blas;                    /**< CBLAS provider chosen at build time */
  int32_t cuda;                        /**< 1 if the CUDA backend was compiled in */
  int32_t cuda_runtime_version;        /**< e.g. 13000; 0 without CUDA */
  int32_t cpu_bf16_gemm;               /**< 1 if bfloat16 products run a native bfloat16 GEMM */
  int32_t cpu_bf16_amx;                /**< 1 if that GEMM runs on AMX tiles */
  const char* cpu_activation_kernels;  /**< "avx512", "avx2" or "portable" */
  const char* int8_gemm_isa;           /**< the int8 kernel family: "amx", "avx512_vnni", …, "portable" */
} sketchcore_build_info;

/** The calling thread's message about its last failed call ("" if the last call succeeded).
 *  @return a NUL-terminated string owned by the library, valid until the thread's next call */
SKETCHCORE_C_API const char* sketchcore_last_error(void);

/** Fills `info` with the build facts of this library.
 *  @param info destination (not NULL)
 *  @return ::SKETCHCORE_OK or ::SKETCHCORE_ERROR_NULL_POINTER */
SKETCHCORE_C_API sketchcore_status sketchcore_get_build_info(sketchcore_build_info* info);

/** Sets how many CPU threads sketchcore's loops and its BLAS may use (process-wide).
 *  @param num_threads ≥ 1
 *  @return ::SKETCHCORE_OK or ::SKETCHCORE_ERROR_INVALID_ARGUMENT */
SKETCHCORE_C_API sketchcore_status sketchcore_set_num_threads(int32_t num_threads);

/** Reads the CPU thread count in effect.
 *  @param num_threads destination (not NULL)
 *  @return ::SKETCHCORE_OK or ::SKETCHCORE_ERROR_NULL_POINTER */
SKETCHCORE_C_API sketchcore_status sketchcore_get_num_threads(int32_t* num_threads);

/** Reads the number of CUDA devices sketchcore can use (0 without the CUDA backend or a device).
 *  @param count destination (not NULL)
 *  @return ::SKETCHCORE_OK or ::SKETCHCORE_ERROR_NULL_POINTER */
SKETCHCORE_C_API sketchcore_status sketchcore_cuda_device_count(int32_t* count);

/** Looks up an activation by name ("none", "relu", "gelu", "gelu_tanh", "silu").
 *  @param name NUL-terminated name (not NULL)
 *  @param activation destination of the ::sketchcore_activation code (not NULL)
 *  @return ::SKETCHCORE_OK, ::SKETCHCORE_ERROR_NULL_POINTER or ::SKETCHCORE_ERROR_INVALID_ARGUMENT */
SKETCHCORE_C_API sketchcore_status sketchcore_activation_from_name(const char* name, int32_t* activation);

/** Sets `epilogue` to the defaults: scale 1, no bias, no activations, no dropout, seed 0.
 *  @param epilogue destination (not NULL)
 *  @return ::SKETCHCORE_OK or ::SKETCHCORE_ERROR_NULL_POINTER */
SKETCHCORE_C_API sketchcore_status sketchcore_epilogue_init(sketchcore_epilogue* epilogue);

/** Computes the shape of sketchcore_sketched_matmul()'s result, `x.shape[:-1] + (d_out,)`.
 *  @param x, S, U the operands, as for sketchcore_sketched_matmul()
 *  @param shape destination of the extents (room for `capacity` values)
 *  @param capacity number of values `shape` can hold (at least x's rank)
 *  @param ndim destination of the result's rank
 *  @return ::SKETCHCORE_OK or an error code (see sketchcore_sketched_matmul()) */
SKETCHCORE_C_API sketchcore_status sketchcore_sketched_matmul_output_shape(const sketchcore_tensor* x,
                                                                           const sketchcore_tensor* S,
                                                                           const sketchcore_tensor* U, int64_t* shape,
                                                                           int32_t capacity, int32_t* ndim);

/** The sketched GEMM `out = dropout(act(scale · Σ_t σ(x·S_t)·U_t + bias))` (C++ sketched_matmul).
 *
 *  `x` (…, d_in); `S` (d_in, k) with `U` (k, d_out), or `S` (T, d_in, k) with `U` (T, k, d_out)
 *  for a sum of T terms (Panther's SKLinear is 2T such terms with scale 1/(2T)); `out`
 *  x.shape[:-1] + (d_out,). All of one dtype (float16, bfloat16, float32 or float64) on one
 *  device; any strides; `out` must not overlap an input. Results are the C++ API's, bit for bit.
 *  @param x input (not NULL)
 *  @param S first factor(s) (not NULL)
 *  @param U second factor(s) (not NULL)
 *  @param out output (not NULL)
 *  @param epilogue scale, bias, activations, dropout; NULL for the defaults
 *  @return ::SKETCHCORE_OK; ::SKETCHCORE_ERROR_NULL_POINTER, ::SKETCHCORE_ERROR_SHAPE,
 *          ::SKETCHCORE_ERROR_DTYPE, ::SKETCHCORE_ERROR_DEVICE, ::SKETCHCORE_ERROR_INVALID_ARGUMENT,
 *          ::SKETCHCORE_ERROR_OUT_OF_MEMORY, ::SKETCHCORE_ERROR_CUDA or ::SKETCHCORE_ERROR_UNVERIFIED_PATH */
SKETCHCORE_C_API sketchcore_status sketchcore_sketched_matmul(const sketchcore_tensor* x, const sketchcore_tensor* S,
                                                              const sketchcore_tensor* U, const sketchcore_tensor* out,
                                                              const sketchcore_epilogue* epilogue);

/** Symmetric per-column int8 quantization of a 2-D weight, `w ≈ q · scale` (the same values as
 *  Python's `sketchcore.quantize_int8`): `scale[j] = max_i |w[i, j]| / 127` in float32 (1 for an
 *  all-zero column), `q = clip(round_half_even(w / scale), ±127)`, computed in float32.
 *  @param w float32 or float64 (k, n), any strides, CPU, finite values (not NULL)
 *  @param q int8 (k, n), any strides, CPU (not NULL)
 *  @param scale float32 (n,), any stride, CPU (not NULL)
 *  @return ::SKETCHCORE_OK, ::SKETCHCORE_ERROR_NULL_POINTER, ::SKETCHCORE_ERROR_SHAPE,
 *          ::SKETCHCORE_ERROR_DTYPE, ::SKETCHCORE_ERROR_DEVICE or ::SKETCHCORE_ERROR_INVALID_ARGUMENT
 *          (a non-finite value of w) */
SKETCHCORE_C_API sketchcore_status sketchcore_int8_quantize(const sketchcore_tensor* w, const sketchcore_tensor* q,
                                                            const sketchcore_tensor* scale);

/** Packs int8 values with their column scales into a new factor (C++ `Int8Factor`).
 *  @param q int8 (k, n), values in [−127, 127], any strides, CPU (not NULL)
 *  @param scale float32 (n,), finite and ≥ 0, any stride, CPU (not NULL)
 *  @param factor destination of the new handle (not NULL; set to NULL on failure); free it
 *                with sketchcore_int8_factor_destroy()
 *  @return ::SKETCHCORE_OK or an error code naming the argument */
SKETCHCORE_C_API sketchcore_status sketchcore_int8_factor_create(const sketchcore_tensor* q,
                                                                 const sketchcore_tensor* scale,
                                                                 sketchcore_int8_factor** factor);

/** Frees a factor made by sketchcore_int8_factor_create(); NULL is accepted and does nothing.
 *  @param factor the handle
 *  @return ::SKETCHCORE_OK */
SKETCHCORE_C_API sketchcore_status sketchcore_int8_factor_destroy(sketchcore_int8_factor* factor);

/** Reads a factor's extents and the bytes its packing holds.
 *  @param factor the handle (not NULL)
 *  @param rows destination of k, or NULL
 *  @param cols destination of n, or NULL
 *  @param nbytes destination of the packed size in bytes, or NULL
 *  @return ::SKETCHCORE_OK or ::SKETCHCORE_ERROR_NULL_POINTER */
SKETCHCORE_C_API sketchcore_status sketchcore_int8_factor_info(const sketchcore_int8_factor* factor, int64_t* rows,
                                                               int64_t* cols, int64_t* nbytes);

/** Copies a factor's int8 values and column scales out.
 *  @param factor the handle (not NULL)
 *  @param q int8 (k, n), any strides, CPU; NULL to skip
 *  @param scale float32 (n,), any stride, CPU; NULL to skip
 *  @return ::SKETCHCORE_OK or an error code naming the argument */
SKETCHCORE_C_API sketchcore_status sketchcore_int8_factor_unpack(const sketchcore_int8_factor* factor,
                                                                 const sketchcore_tensor* q,
                                                                 const sketchcore_tensor* scale);

/** The int8 sketched GEMM `out = act(deq(q8(σ(deq(q8(x)·S_q)))·U_q) + bias)` (C++
 *  int8_sketched_matmul): activations quantized per row, int32 sums.
 *  @param x float32 (…, d_in), any strides (not NULL)
 *  @param S factor (d_in, r) (not NULL)
 *  @param U factor (r, d_out) (not NULL)
 *  @param out float32 x.shape[:-1] + (d_out,), unit last stride, rows that collapse (not NULL)
 *  @param epilogue scale, bias, activations; dropout_p must be 0; NULL for the defaults
 *  @return ::SKETCHCORE_OK or an error code naming the argument */
SKETCHCORE_C_API sketchcore_status sketchcore_int8_sketched_matmul(const sketchcore_tensor* x,
                                                                   const sketchcore_int8_factor* S,
                                                                   const sketchcore_int8_factor* U,
                                                                   const sketchcore_tensor* out,
                                                                   const sketchcore_epilogue* epilogue);

/** The full-rank int8 product `out = act(deq(q8(x)·W_q) + bias)` (C++ int8_matmul).
 *  @param x float32 (…, d_in), any strides (not NULL)
 *  @param W factor (d_in, d_out) (not NULL)
 *  @param out float32 x.shape[:-1] + (d_out,), unit last stride, rows that collapse (not NULL)
 *  @param epilogue scale, bias, activation; no dropout, no inner activation; NULL for the defaults
 *  @return ::SKETCHCORE_OK or an error code naming the argument */
SKETCHCORE_C_API sketchcore_status sketchcore_int8_matmul(const sketchcore_tensor* x,
                                                          const sketchcore_int8_factor* W,
                                                          const sketchcore_tensor* out,
                                                          const sketchcore_epilogue* epilogue);

/** Creates a sketching operator S of shape (rows, cols) (C++ `SketchOperator`); every entry is a
 *  pure function of (kind, rows, cols, seed, nnz, scaled) and its position.
 *  @param kind a ::sketchcore_sketch_kind code
 *  @param rows m, 1 ≤ m < 2^31
 *  @param cols n, 1 ≤ n < 2^31
 *  @param seed Philox key
 *  @param nnz nonzeros per column for ::SKETCHCORE_SKETCH_SPARSE_SIGN (1 ≤ nnz ≤ rows); other kinds ignore it
 *  @param scaled nonzero: scale so that E[SᵀS] = I
 *  @param sketch destination of the new handle (not NULL; NULL on failure); free it with
 *                sketchcore_sketch_destroy()
 *  @return ::SKETCHCORE_OK, ::SKETCHCORE_ERROR_NULL_POINTER or ::SKETCHCORE_ERROR_INVALID_ARGUMENT */
SKETCHCORE_C_API sketchcore_status sketchcore_sketch_create(int32_t kind, int64_t rows, int64_t cols, uint64_t seed,
                                                            int64_t nnz, int32_t scaled, sketchcore_sketch** sketch);

/** Frees an operator made by sketchcore_sketch_create(); NULL is accepted and does nothing.
 *  @param sketch the handle
 *  @return ::SKETCHCORE_OK */
SKETCHCORE_C_API sketchcore_status sketchcore_sketch_destroy(sketchcore_sketch* sketch);

/** Writes the block S[row0 : row0 + out.shape[0], col0 : col0 + out.shape[1]] into `out`.
 *  @param sketch the operator (not NULL)
 *  @param out float32 or float64, 2-D, any strides, CPU (not NULL)
 *  @param row0 first row of the block (≥ 0)
 *  @param col0 first column of the block (≥ 0)
 *  @return ::SKETCHCORE_OK or an error code naming the argument */
SKETCHCORE_C_API sketchcore_status sketchcore_sketch_to_dense(const sketchcore_sketch* sketch,
                                                              const sketchcore_tensor* out, int64_t row0,
                                                              int64_t col0);

/** Computes the shape of sketchcore_sketch_apply()'s result.
 *  @param sketch the operator (not NULL)
 *  @param a the operand (not NULL)
 *  @param right 0: S·A (A (…, n, p) → (…, m, p)); nonzero: A·S (A (…, p, m) → (…, p, n))
 *  @param transpose nonzero: Sᵀ in place of S
 *  @param shape destination of the extents (room for `capacity` values)
 *  @param capacity number of values `shape` can hold (at least a's rank)
 *  @param ndim destination of the result's rank
 *  @return ::SKETCHCORE_OK or an error code naming the argument */
SKETCHCORE_C_API sketchcore_status sketchcore_sketch_apply_output_shape(const sketchcore_sketch* sketch,
                                                                        const sketchcore_tensor* a, int32_t right,
                                                                        int32_t transpose, int64_t* shape,
                                                                        int32_t capacity, int32_t* ndim);

/** `out = S·A` (or `A·S` when `right`; Sᵀ when `transpose`) without forming S; leading
 *  dimensions of `a` are a batch (C++ sketch_apply).
 *  @param sketch the operator (not NULL)
 *  @param a float32 or float64 operand (float16 and bfloat16 too on a CUDA device), any strides (not NULL)
 *  @param out the result, shape sketchcore_sketch_apply_output_shape() (not NULL)
 *  @param right 0 for S·A, nonzero for A·S
 *  @param transpose nonzero: Sᵀ in place of S
 *  @return ::SKETCHCORE_OK or an error code naming the argument */
SKETCHCORE_C_API sketchcore_status sketchcore_sketch_apply(const sketchcore_sketch* sketch,
                                                           const sketchcore_tensor* a, const sketchcore_tensor* out,
                                                           int32_t right, int32_t transpose);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* SKETCHCORE_SKETCHCORE_H */
