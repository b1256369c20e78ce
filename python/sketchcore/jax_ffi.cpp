// XLA FFI handlers for sketchcore.jax: sketched_matmul and its backward as XLA custom calls,
// on the CPU and on CUDA devices, so that they run inside jax.jit (and, through
// sketchcore.jax's custom_vjp and vmap rule, under grad and vmap). Written against
// sketchcore's own declarations of XLA's FFI C ABI, version 0.1 (xla_ffi_abi.hpp), so every
// build has them, JAX installed or not, and every jaxlib since 0.5 loads them. Loaded with
// ctypes and registered by python/sketchcore/jax.py.
//
// XLA hands over dense row-major buffers; they are viewed (never copied) as TensorViews and
// the public C++ API does the rest, as for NumPy or CuPy arrays. On CUDA the work is queued
// on XLA's stream for the call (an ExecutionScope), on the device XLA names.
#include <cstdint>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>

#include "jax_ffi_frame.hpp"
#include "sketchcore/epilogue.hpp"
#include "sketchcore/execution.hpp"
#include "sketchcore/gated_paths.hpp"
#include "sketchcore/sketched_matmul.hpp"
#include "sketchcore/tensor.hpp"
#include "xla_ffi_abi.hpp"

namespace {

namespace abi = sketchcore::xla_abi;
using sketchcore::Device;
using sketchcore::DeviceType;
using sketchcore::jax_ffi::Frame;

sketchcore::Epilogue epilogue_of(const Frame& f, const sketchcore::TensorView& bias) {
  sketchcore::Epilogue e;
  e.scale = f.f64("scale");
  if (f.pred("has_bias")) e.bias = bias;
  e.activation = sketchcore::parse_activation(f.string("activation"));
  e.dropout_p = f.f64("dropout_p");
  e.seed = static_cast<std::uint64_t>(f.s64("seed"));  // MLIR's Python bindings cannot build a uint64 ≥ 2^63
  e.inner_activation = sketchcore::parse_activation(f.string("inner_activation"));
  return e;
}

// Operands: x, S, U, bias (a 0-length placeholder without one). Results: y, z = x·[S_1 … S_T]
// (saved for the backward).
void forward(const abi::CallFrame& frame, Device d) {
  const Frame f(frame, "sketchcore.jax sketched_matmul", 4, 2);
  sketchcore::sketched_matmul(f.arg(0, "x", d), f.arg(1, "S", d), f.arg(2, "U", d), f.ret(0, "out", d),
                              epilogue_of(f, f.arg(3, "bias", d)), f.ret(1, "intermediate", d));
}

// Operands: grad_out, x, S, U, z, bias. Results: dx, dS, dU, dbias (0-length without a bias).
void backward(const abi::CallFrame& frame, Device d) {
  const Frame f(frame, "sketchcore.jax sketched_matmul_backward", 6, 4);
  const sketchcore::Epilogue e = epilogue_of(f, f.arg(5, "bias", d));
  sketchcore::SketchedMatmulGradients g;
  g.x = f.ret(0, "dx", d);
  g.S = f.ret(1, "dS", d);
  g.U = f.ret(2, "dU", d);
  if (e.bias) g.bias = f.ret(3, "dbias", d);
  sketchcore::sketched_matmul_backward(f.arg(0, "grad_out", d), f.arg(1, "x", d), f.arg(2, "S", d),
                                       f.arg(3, "U", d), f.arg(4, "intermediate", d), e, g);
}

/// One handler: answers XLA's metadata query, checks the frame, runs `body` under the call's
/// execution options (the CPU's defaults: the Python bindings leave the options of their last
/// call current on their thread, where XLA may run this handler; on CUDA, XLA's stream), and
/// turns the core's exceptions into XLA errors, which JAX raises in Python.
template <DeviceType kind, void (*body)(const abi::CallFrame&, Device)>
abi::Error* handle(abi::CallFrame* frame) {
  if (sketchcore::jax_ffi::answer_metadata(frame, 0)) return nullptr;
  const abi::Api* api = frame->api;
  if (frame->struct_size < abi::kCallFrameSize) {
    return sketchcore::jax_ffi::make_error(api, abi::ErrorCode::internal,
                                           "sketchcore.jax: XLA passed a call frame older than FFI version 0.1");
  }
  if (frame->stage != abi::ExecutionStage::execute) return nullptr;  // nothing to prepare
  try {
    sketchcore::ExecutionOptions options;
    Device device;
    if constexpr (kind == DeviceType::cuda) {  // not yet run on a GPU: opt-in (gated_paths.hpp)
      sketchcore::require_gated_path(sketchcore::GatedPath::jax_cuda_handlers, "sketchcore.jax on a CUDA device");
      options.cuda_stream = sketchcore::jax_ffi::xla_stream(*frame);
      device = Device{DeviceType::cuda, sketchcore::jax_ffi::xla_device(*frame)};
    }
    const sketchcore::ExecutionScope scope(options);
    body(*frame, device);
    return nullptr;
  } catch (const std::invalid_argument& e) {
    return sketchcore::jax_ffi::make_error(api, abi::ErrorCode::invalid_argument, e.what());
  } catch (const std::bad_alloc& e) {
    return sketchcore::jax_ffi::make_error(api, abi::ErrorCode::resource_exhausted, e.what());
  } catch (const std::exception& e) {
    return sketchcore::jax_ffi::make_error(api, abi::ErrorCode::internal, e.what());
  }
}

}  // namespace

// The library's only exports (it is built with hidden visibility).
#define SKETCHCORE_JAX_HANDLER(name, kind, body)                                               \
  extern "C" __attribute__((visibility("default"))) abi::Error* name(abi::CallFrame* frame) { \
    return handle<kind, body>(frame);                                                          \
  }

SKETCHCORE_JAX_HANDLER(sketchcore_jax_cpu_forward, DeviceType::cpu, forward)
SKETCHCORE_JAX_HANDLER(sketchcore_jax_cpu_backward, DeviceType::cpu, backward)
SKETCHCORE_JAX_HANDLER(sketchcore_jax_cuda_forward, DeviceType::cuda, forward)
SKETCHCORE_JAX_HANDLER(sketchcore_jax_cuda_backward, DeviceType::cuda, backward)
