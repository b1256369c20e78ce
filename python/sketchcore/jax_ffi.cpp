// XLA FFI handlers for sketchcore.jax: sketched_matmul and its backward as XLA custom calls on
// the CPU, so that they run inside jax.jit (and, through sketchcore.jax's custom_vjp and
// vmap rule, under grad and vmap). Built against the FFI headers jaxlib ships
// (jax.ffi.include_dir()) when JAX is importable at build time; loaded with ctypes and
// registered by python/sketchcore/jax.py. XLA hands over dense row-major buffers; they are
// viewed (never copied) as TensorViews and the core does the rest, as for NumPy arrays.
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sketchcore/epilogue.hpp"
#include "sketchcore/errors.hpp"
#include "sketchcore/execution.hpp"
#include "sketchcore/sketched_matmul.hpp"
#include "sketchcore/tensor.hpp"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using sketchcore::DType;
using sketchcore::TensorView;

/// The core's element type of an XLA buffer; throws for types the core does not compute in.
DType dtype_of(ffi::DataType type, const char* name) {
  switch (type) {
    case ffi::DataType::F16: return DType::float16;
    case ffi::DataType::BF16: return DType::bfloat16;
    case ffi::DataType::F32: return DType::float32;
    case ffi::DataType::F64: return DType::float64;
    default:
      throw sketchcore::dtype_error(std::string("sketchcore.jax: ") + name +
                                    ": expected float16, bfloat16, float32 or float64");
  }
}

TensorView view(const ffi::AnyBuffer& buffer, const char* name) {
  const auto dims = buffer.dimensions();
  return TensorView(buffer.untyped_data(), dtype_of(buffer.element_type(), name),
                    std::vector<std::int64_t>(dims.begin(), dims.end()));
}

sketchcore::Epilogue epilogue_of(const ffi::AnyBuffer& bias, bool has_bias, std::string_view activation,
                                 double scale, double dropout_p, std::int64_t seed) {
  sketchcore::Epilogue e;
  e.scale = scale;
  if (has_bias) e.bias = view(bias, "bias");
  e.activation = sketchcore::parse_activation(activation);
  e.dropout_p = dropout_p;
  e.seed = static_cast<std::uint64_t>(seed);  // MLIR's Python bindings cannot build a uint64 ≥ 2^63
  return e;
}

/// Runs `body` under the default execution options (the Python bindings leave the options of
/// their last call current on their thread, where XLA may run this handler: a CUDA stream or
/// NumPy's BLAS must not carry over), turning the core's exceptions into FFI errors (XLA
/// raises them in Python).
template <class Body>
ffi::Error guarded(Body&& body) {
  try {
    const sketchcore::ExecutionScope defaults(sketchcore::ExecutionOptions{});
    body();
    return ffi::Error::Success();
  } catch (const std::invalid_argument& e) {
    return ffi::Error::InvalidArgument(e.what());
  } catch (const std::exception& e) {
    return ffi::Error::Internal(e.what());
  }
}

ffi::Error forward(ffi::AnyBuffer x, ffi::AnyBuffer S, ffi::AnyBuffer U, ffi::AnyBuffer bias,
                   ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::AnyBuffer> z, std::string_view activation,
                   double scale, double dropout_p, std::int64_t seed, bool has_bias) {
  return guarded([&] {
    sketchcore::sketched_matmul(view(x, "x"), view(S, "S"), view(U, "U"), view(*y, "out"),
                                epilogue_of(bias, has_bias, activation, scale, dropout_p, seed),
                                view(*z, "intermediate"));
  });
}

ffi::Error backward(ffi::AnyBuffer grad, ffi::AnyBuffer x, ffi::AnyBuffer S, ffi::AnyBuffer U, ffi::AnyBuffer z,
                    ffi::AnyBuffer bias, ffi::Result<ffi::AnyBuffer> dx, ffi::Result<ffi::AnyBuffer> dS,
                    ffi::Result<ffi::AnyBuffer> dU, ffi::Result<ffi::AnyBuffer> dbias, std::string_view activation,
                    double scale, double dropout_p, std::int64_t seed, bool has_bias) {
  return guarded([&] {
    sketchcore::SketchedMatmulGradients g;
    g.x = view(*dx, "dx");
    g.S = view(*dS, "dS");
    g.U = view(*dU, "dU");
    if (has_bias) g.bias = view(*dbias, "dbias");
    sketchcore::sketched_matmul_backward(view(grad, "grad_out"), view(x, "x"), view(S, "S"), view(U, "U"),
                                         view(z, "intermediate"),
                                         epilogue_of(bias, has_bias, activation, scale, dropout_p, seed), g);
  });
}

}  // namespace

// The two handlers are the library's only exports (built with hidden visibility): declared
// here with default visibility, which the macros' definitions below inherit.
extern "C" __attribute__((visibility("default"))) XLA_FFI_Error* sketchcore_sketched_matmul_ffi(XLA_FFI_CallFrame*);
extern "C" __attribute__((visibility("default"))) XLA_FFI_Error* sketchcore_sketched_matmul_backward_ffi(
    XLA_FFI_CallFrame*);

XLA_FFI_DEFINE_HANDLER_SYMBOL(sketchcore_sketched_matmul_ffi, forward,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // S
                                  .Arg<ffi::AnyBuffer>()  // U
                                  .Arg<ffi::AnyBuffer>()  // bias (a 0-length placeholder without one)
                                  .Ret<ffi::AnyBuffer>()  // y
                                  .Ret<ffi::AnyBuffer>()  // z = x·[S_1 … S_T], for the backward
                                  .Attr<std::string_view>("activation")
                                  .Attr<double>("scale")
                                  .Attr<double>("dropout_p")
                                  .Attr<std::int64_t>("seed")  // the uint64 seed's bits
                                  .Attr<bool>("has_bias"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(sketchcore_sketched_matmul_backward_ffi, backward,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()  // grad_out
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // S
                                  .Arg<ffi::AnyBuffer>()  // U
                                  .Arg<ffi::AnyBuffer>()  // z
                                  .Arg<ffi::AnyBuffer>()  // bias
                                  .Ret<ffi::AnyBuffer>()  // dx
                                  .Ret<ffi::AnyBuffer>()  // dS
                                  .Ret<ffi::AnyBuffer>()  // dU
                                  .Ret<ffi::AnyBuffer>()  // dbias (0-length without a bias)
                                  .Attr<std::string_view>("activation")
                                  .Attr<double>("scale")
                                  .Attr<double>("dropout_p")
                                  .Attr<std::int64_t>("seed")  // the uint64 seed's bits
                                  .Attr<bool>("has_bias"));
