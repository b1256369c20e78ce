// Reading an XLA FFI call frame (declared in xla_ffi_abi.hpp): the metadata query, buffers
// as sketchcore TensorViews, attributes by name, XLA's stream and device, and errors
// handed back to XLA. Used by jax_ffi.cpp's handlers only.
#pragma once

#include <cstdint>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "sketchcore/errors.hpp"
#include "sketchcore/runtime.hpp"
#include "sketchcore/tensor.hpp"
#include "xla_ffi_abi.hpp"

namespace sketchcore::jax_ffi {

namespace abi = xla_abi;

/// An error object of XLA's (XLA takes ownership and raises it in Python).
inline abi::Error* make_error(const abi::Api* api, abi::ErrorCode code, const std::string& message) {
  abi::ErrorCreateArgs args{};
  args.struct_size = offsetof(abi::ErrorCreateArgs, code) + sizeof(args.code);
  args.extension_start = nullptr;
  args.message = message.c_str();  // XLA copies it
  args.code = code;
  return api->error_create(&args);
}

/// Whether `frame` is XLA's metadata query rather than a call; if so, answers it: the ABI
/// version these handlers speak and their traits.
inline bool answer_metadata(abi::CallFrame* frame, std::uint32_t traits) {
  abi::ExtensionBase* extension = frame->extension_start;
  if (extension == nullptr || extension->type != abi::ExtensionType::metadata) return false;
  abi::Metadata* metadata = reinterpret_cast<abi::MetadataExtension*>(extension)->metadata;
  metadata->api_version = abi::ApiVersion{sizeof(abi::ApiVersion), nullptr, abi::kApiMajor, abi::kApiMinor};
  metadata->traits = traits;
  return true;
}

/// The call's arguments, results and attributes, checked against the handler's signature.
class Frame {
 public:
  Frame(const abi::CallFrame& frame, const char* handler, std::int64_t args, std::int64_t rets)
      : frame_(frame), handler_(handler) {
    if (frame.args.size != args || frame.rets.size != rets) {
      throw std::invalid_argument(std::string(handler) + ": expected " + std::to_string(args) + " operands and " +
                                  std::to_string(rets) + " results, got " + std::to_string(frame.args.size) +
                                  " and " + std::to_string(frame.rets.size));
    }
  }

  /// Operand `i` viewed (not copied) as a dense row-major tensor on `device`.
  TensorView arg(std::int64_t i, const char* name, Device device) const {
    return view(*static_cast<const abi::Buffer*>(frame_.args.args[i]), name, device);
  }
  /// Result `i`, likewise.
  TensorView ret(std::int64_t i, const char* name, Device device) const {
    return view(*static_cast<const abi::Buffer*>(frame_.rets.rets[i]), name, device);
  }

  std::string_view string(std::string_view name) const {
    const auto* span = static_cast<const abi::ByteSpan*>(attr(name, abi::AttrType::string));
    return {span->ptr, span->len};
  }
  double f64(std::string_view name) const { return scalar<double>(name, abi::DataType::f64); }
  std::int64_t s64(std::string_view name) const { return scalar<std::int64_t>(name, abi::DataType::s64); }
  bool pred(std::string_view name) const { return scalar<bool>(name, abi::DataType::pred); }

 private:
  TensorView view(const abi::Buffer& buffer, const char* name, Device device) const {
    return TensorView(buffer.data, dtype_of(buffer.dtype, name),
                      std::vector<std::int64_t>(buffer.dims, buffer.dims + buffer.rank), {}, device);
  }

  DType dtype_of(abi::DataType type, const char* name) const {
    switch (type) {
      case abi::DataType::f16: return DType::float16;
      case abi::DataType::bf16: return DType::bfloat16;
      case abi::DataType::f32: return DType::float32;
      case abi::DataType::f64: return DType::float64;
      default:
        throw dtype_error(std::string(handler_) + ": " + name +
                          ": expected float16, bfloat16, float32 or float64, got XLA type " +
                          std::to_string(static_cast<int>(type)));
    }
  }

  const void* attr(std::string_view name, abi::AttrType type) const {
    const abi::Attrs& attrs = frame_.attrs;
    for (std::int64_t i = 0; i < attrs.size; ++i) {
      if (std::string_view(attrs.names[i]->ptr, attrs.names[i]->len) != name) continue;
      if (attrs.types[i] != type) {
        throw std::invalid_argument(std::string(handler_) + ": attribute " + std::string(name) +
                                    ": expected kind " + std::to_string(static_cast<int>(type)) + ", got " +
                                    std::to_string(static_cast<int>(attrs.types[i])));
      }
      return attrs.attrs[i];
    }
    throw std::invalid_argument(std::string(handler_) + ": attribute " + std::string(name) + " is missing");
  }

  template <class T>
  T scalar(std::string_view name, abi::DataType type) const {
    const auto* s = static_cast<const abi::Scalar*>(attr(name, abi::AttrType::scalar));
    if (s->dtype != type) {
      throw std::invalid_argument(std::string(handler_) + ": attribute " + std::string(name) + ": expected XLA type " +
                                  std::to_string(static_cast<int>(type)) + ", got " +
                                  std::to_string(static_cast<int>(s->dtype)));
    }
    T value;
    std::memcpy(&value, s->value, sizeof(T));
    return value;
  }

  const abi::CallFrame& frame_;
  const char* handler_;
};

/// The cudaStream_t XLA:GPU runs this call on.
inline void* xla_stream(const abi::CallFrame& frame) {
  abi::StreamGetArgs args{};
  args.struct_size = offsetof(abi::StreamGetArgs, stream) + sizeof(args.stream);
  args.ctx = frame.ctx;
  if (abi::Error* error = frame.api->stream_get(&args)) {
    abi::ErrorDestroyArgs destroy{sizeof(abi::ErrorDestroyArgs), nullptr, error};
    frame.api->error_destroy(&destroy);
    throw std::runtime_error("sketchcore.jax: XLA did not provide the call's CUDA stream");
  }
  return args.stream;
}

/// The CUDA device of this call: asked from XLA where its API has the query (newer than
/// version 0.1); an older jaxlib cannot tell, which is unambiguous only with one device.
inline int xla_device(const abi::CallFrame& frame) {
  const abi::Api* api = frame.api;
  if (api->struct_size >= offsetof(abi::Api, device_ordinal_get) + sizeof(void*) && api->device_ordinal_get) {
    abi::DeviceOrdinalGetArgs args{};
    args.struct_size = offsetof(abi::DeviceOrdinalGetArgs, device_ordinal) + sizeof(args.device_ordinal);
    args.ctx = frame.ctx;
    abi::Error* error = api->device_ordinal_get(&args);
    if (error == nullptr) return args.device_ordinal;
    abi::ErrorDestroyArgs destroy{sizeof(abi::ErrorDestroyArgs), nullptr, error};
    api->error_destroy(&destroy);
  }
  if (cuda_device_count() > 1) {
    throw device_error("sketchcore.jax: this jaxlib cannot tell its FFI handlers which of the " +
                       std::to_string(cuda_device_count()) +
                       " CUDA devices a call runs on; use a newer jaxlib for several devices");
  }
  return 0;
}

}  // namespace sketchcore::jax_ffi
