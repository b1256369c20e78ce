// sketchcore's own declarations of the part of XLA's FFI C ABI its JAX handlers use, so that
// the handlers build without jaxlib (its headers travel only inside jaxlib wheels) and load
// on every jaxlib since 0.5.
//
// The ABI is versioned (major.minor): XLA asks each handler which version it was written
// against (the metadata query below) and accepts any version from its own minimum (0.1 for
// every jaxlib up to at least 0.10) to its own. These declarations are version 0.1, the
// layout every jaxlib >= 0.5 speaks. Every argument struct starts with its size in bytes,
// counted to the last field its writer knows: a newer XLA passes larger structs, whose extra
// trailing fields version 0.1 code never reads. Fields are written here in XLA's order; the
// names are ours.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sketchcore::xla_abi {

inline constexpr int kApiMajor = 0;
inline constexpr int kApiMinor = 1;

struct Error;             // opaque, created by XLA's error_create
struct ExecutionContext;  // opaque
struct Future;            // opaque
struct Api;

/// Extensions chained from a struct's `extension_start` (the only kind: the metadata query).
enum class ExtensionType : int { metadata = 1 };

struct ExtensionBase {
  std::size_t struct_size;
  ExtensionType type;
  ExtensionBase* next;
};

struct ApiVersion {
  std::size_t struct_size;
  ExtensionBase* extension_start;
  int major_version;
  int minor_version;
};

/// absl-style status codes.
enum class ErrorCode : int { ok = 0, invalid_argument = 3, resource_exhausted = 8, internal = 13 };

struct ErrorCreateArgs {
  std::size_t struct_size;
  ExtensionBase* extension_start;
  const char* message;
  ErrorCode code;
};

struct ErrorDestroyArgs {
  std::size_t struct_size;
  ExtensionBase* extension_start;
  Error* error;
};

/// XLA's primitive types (xla_data.proto numbering): the floats sketchcore computes in.
enum class DataType : int { f16 = 10, f32 = 11, f64 = 12, bf16 = 16, pred = 1, s64 = 5 };

struct Buffer {
  std::size_t struct_size;
  ExtensionBase* extension_start;
  DataType dtype;
  void* data;
  std::int64_t rank;
  std::int64_t* dims;  // rank of them; the buffer is dense and row-major
};

enum class AttrType : int { array = 1, dictionary = 2, scalar = 3, string = 4 };

struct ByteSpan {
  const char* ptr;
  std::size_t len;
};

struct Scalar {
  DataType dtype;
  void* value;
};

enum class ExecutionStage : int { instantiate = 0, prepare = 1, initialize = 2, execute = 3 };

struct Args {
  std::size_t struct_size;
  ExtensionBase* extension_start;
  std::int64_t size;
  int* types;    // ArgType per argument (1: buffer)
  void** args;   // Buffer* per argument
};

struct Rets {
  std::size_t struct_size;
  ExtensionBase* extension_start;
  std::int64_t size;
  int* types;    // RetType per result (1: buffer)
  void** rets;   // Buffer* per result
};

/// Attributes, sorted by name.
struct Attrs {
  std::size_t struct_size;
  ExtensionBase* extension_start;
  std::int64_t size;
  AttrType* types;
  ByteSpan** names;
  void** attrs;  // Scalar* for scalars, ByteSpan* for strings
};

struct CallFrame {
  std::size_t struct_size;
  ExtensionBase* extension_start;
  const Api* api;
  ExecutionContext* ctx;
  ExecutionStage stage;
  Args args;
  Rets rets;
  Attrs attrs;
  Future* future;  // out, for asynchronous handlers (not used)
};
/// The size version 0.1 counts for a call frame: up to `attrs` (the future came later).
inline constexpr std::size_t kCallFrameSize = offsetof(CallFrame, attrs) + sizeof(Attrs);

/// Handler traits (bits): safe to record into a command buffer (CUDA graph).
inline constexpr std::uint32_t kCommandBufferCompatible = 1u << 0;

struct Metadata {
  std::size_t struct_size;
  ApiVersion api_version;
  std::uint32_t traits;
};

struct MetadataExtension {
  ExtensionBase extension_base;
  Metadata* metadata;
};

struct StreamGetArgs {
  std::size_t struct_size;
  ExtensionBase* extension_start;
  ExecutionContext* ctx;
  void* stream;  // out: the cudaStream_t of the call on XLA:GPU
};

struct DeviceOrdinalGetArgs {
  std::size_t struct_size;
  ExtensionBase* extension_start;
  ExecutionContext* ctx;
  std::int32_t device_ordinal;  // out
};

using ErrorCreateFn = Error* (*)(ErrorCreateArgs*);
using ErrorDestroyFn = void (*)(ErrorDestroyArgs*);
using StreamGetFn = Error* (*)(StreamGetArgs*);
using DeviceOrdinalGetFn = Error* (*)(DeviceOrdinalGetArgs*);
using Handler = Error*(CallFrame*);

/// XLA's function table. Entries sketchcore does not call are kept as untyped slots. The
/// last two appeared after version 0.1: read them only where `struct_size` covers them.
struct Api {
  std::size_t struct_size;
  ExtensionBase* extension_start;
  ApiVersion api_version;
  const void* internal_api;
  ErrorCreateFn error_create;
  void* error_get_message;
  ErrorDestroyFn error_destroy;
  void* handler_register;
  StreamGetFn stream_get;
  void* type_register;
  void* execution_context_get;
  void* state_set;
  void* state_get;
  void* device_memory_allocate;
  void* device_memory_free;
  void* thread_pool_schedule;
  void* thread_pool_num_threads;
  void* future_create;
  void* future_set_available;
  void* future_set_error;
  void* run_id_get;                       // newer than 0.1
  DeviceOrdinalGetFn device_ordinal_get;  // newer than 0.1
};

static_assert(sizeof(ApiVersion) == 24 && sizeof(Buffer) == 48 && sizeof(Attrs) == 48,
              "the XLA FFI structs must keep XLA's LP64 layout");
static_assert(kCallFrameSize == 168, "XLA_FFI_CallFrame's version 0.1 size");

}  // namespace sketchcore::xla_abi
