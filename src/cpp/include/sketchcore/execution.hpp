/// @file execution.hpp
/// @brief Where and how the calling thread's operations run on a CUDA device.
#pragma once

#include "sketchcore/export.hpp"

namespace sketchcore {

/// Execution settings of CUDA work. They apply to the calling thread only (each thread
/// has its own), so concurrent callers with different streams do not interfere.
struct ExecutionOptions {
  /// The `cudaStream_t` the work is ordered on, its temporaries included; nullptr is the
  /// legacy default stream. Operations return once the work is enqueued: outputs are
  /// ready in stream order, as with any CUDA library.
  void* cuda_stream = nullptr;
  /// Lets float32 GEMMs use TF32 tensor cores (10-bit mantissa inputs, float32
  /// accumulation). Off by default: float32 results are then exact to float32 GEMMs.
  bool allow_tf32 = false;
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
