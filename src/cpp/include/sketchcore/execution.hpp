/// @file execution.hpp
/// @brief Where and how the calling thread's operations run: the CUDA stream, TF32, and
/// which BLAS runs the CPU GEMMs.
#pragma once

#include "sketchcore/export.hpp"

namespace sketchcore {

/// A BLAS for the CPU GEMMs of the calling thread's operations, instead of the one
/// sketchcore was built with: typically the BLAS the caller's framework already runs (NumPy's
/// OpenBLAS, torch's MKL), so that one thread pool serves both and neither pool's spinning
/// threads take the cores from the other. Reference-BLAS (Fortran) entry points: column-major,
/// every argument by pointer, integers I of `index_bits` bits:
/// @code
///   void sgemm_(const char* transa, const char* transb, const I* m, const I* n, const I* k,
///               const float* alpha, const float* a, const I* lda, const float* b, const I* ldb,
///               const float* beta, float* c, const I* ldc);
/// @endcode
/// and `dgemm_` alike with double. A null pointer leaves that precision to the built-in BLAS.
struct CpuGemmProvider {
  void* sgemm = nullptr;  ///< the single-precision entry point, or nullptr
  void* dgemm = nullptr;  ///< the double-precision entry point, or nullptr
  int index_bits = 32;    ///< 32 (LP64 interface) or 64 (ILP64 interface)
  /// The OpenMP runtime that BLAS runs its threads on (GNU libgomp's ABI, which LLVM's and
  /// Intel's runtimes export too), or null. When set, sketchcore's own parallel loops of the
  /// calling thread's operations (the epilogue pass, staging copies) run on that runtime's
  /// threads, still spinning from the GEMM before, instead of on sketchcore's workers, which
  /// would wait for those spinning threads to release the cores:
  /// `void GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags)`.
  void* gomp_parallel = nullptr;
};

/// Execution settings. They apply to the calling thread only (each thread
/// has its own), so concurrent callers with different streams do not interfere.
struct ExecutionOptions {
  /// The `cudaStream_t` the work is ordered on, its temporaries included; nullptr is the
  /// legacy default stream. Operations return once the work is enqueued: outputs are
  /// ready in stream order, as with any CUDA library.
  void* cuda_stream = nullptr;
  /// Lets float32 GEMMs use TF32 tensor cores (10-bit mantissa inputs, float32
  /// accumulation). Off by default: float32 results are then exact to float32 GEMMs.
  bool allow_tf32 = false;
  /// The BLAS of the CPU GEMMs (must outlive the calls made under these options); nullptr:
  /// the BLAS sketchcore was built with. Batched GEMMs are not used while one is set.
  const CpuGemmProvider* cpu_gemm = nullptr;
  /// Times the candidate algorithms of each CUDA GEMM shape at its first call (up to 8 of
  /// cuBLASLt's, the stream synchronised once per candidate) and keeps the fastest for the
  /// process. Off by default: the heuristic's choice is reproducible, a timed choice may
  /// differ between processes and with it the last bits of results. Not done for GEMMs that
  /// accumulate into their output or while the stream is being captured into a CUDA graph.
  bool tune_gemms = false;
};

/// The calling thread's current options (the defaults unless an ExecutionScope is active).
SKETCHCORE_API ExecutionOptions current_execution() noexcept;

/// Sets the calling thread's options for the lifetime of the scope, then restores the
/// previous ones. Scopes nest.
/// @code
///   sketchcore::ExecutionScope scope({my_stream, /*allow_tf32=*/false});
///   sketchcore::sketched_matmul(x, S, U, out);  // enqueued on my_stream
/// @endcode
class SKETCHCORE_API ExecutionScope {
 public:
  /// Makes `options` current for the calling thread.
  explicit ExecutionScope(const ExecutionOptions& options) noexcept;
  /// Restores the options that were current at construction.
  ~ExecutionScope();
  ExecutionScope(const ExecutionScope&) = delete;
  ExecutionScope& operator=(const ExecutionScope&) = delete;

 private:
  ExecutionOptions previous_;
};

}  // namespace sketchcore
