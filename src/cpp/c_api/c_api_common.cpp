// The C ABI's shared pieces: the thread-local last error, the mapping of C++ exceptions to
// sketchcore_status codes (errors.hpp's types, std::bad_alloc, anything else), and the checked
// conversion of the C structs (sketchcore_tensor, sketchcore_epilogue) into the C++ API's types.
#include "c_api/c_api_common.hpp"

#include <exception>
#include <new>
#include <string>
#include <vector>

#include "detail/check.hpp"
#include "sketchcore/errors.hpp"

namespace sketchcore::c_api {

// The calling thread's message (sketchcore_last_error, at the end of this file, returns it).
thread_local std::string last_error;

namespace {

std::string field(const char* name, const char* member) { return std::string(name) + "." + member; }

DType dtype_of(std::int32_t code, const char* op, const std::string& arg) {
  switch (code) {
    case SKETCHCORE_FLOAT16: return DType::float16;
    case SKETCHCORE_BFLOAT16: return DType::bfloat16;
    case SKETCHCORE_FLOAT32: return DType::float32;
    case SKETCHCORE_FLOAT64: return DType::float64;
    case SKETCHCORE_INT8:
      detail::fail<dtype_error>(op, arg, "a floating dtype code (SKETCHCORE_FLOAT16/BFLOAT16/FLOAT32/FLOAT64)",
                                "SKETCHCORE_INT8 (4)");
    default:
      detail::fail<dtype_error>(op, arg, "a sketchcore_dtype code 0 to 4", std::to_string(code));
  }
}

Device device_of(const sketchcore_tensor& t, const char* op, const char* name) {
  if (t.device_type != SKETCHCORE_CPU && t.device_type != SKETCHCORE_CUDA) {
    detail::fail<device_error>(op, field(name, "device_type"), "SKETCHCORE_CPU (0) or SKETCHCORE_CUDA (1)",
                               std::to_string(t.device_type));
  }
  if (t.device_index < 0 || (t.device_type == SKETCHCORE_CPU && t.device_index != 0)) {
    detail::fail<device_error>(op, field(name, "device_index"),
                               t.device_type == SKETCHCORE_CPU ? "0 for the CPU" : "a device ordinal >= 0",
                               std::to_string(t.device_index));
  }
  return Device{t.device_type == SKETCHCORE_CPU ? DeviceType::cpu : DeviceType::cuda, t.device_index};
}

// Checks rank, shape and strides pointers and the extents' signs; returns shape and strides.
void read_extents(const sketchcore_tensor& t, const char* op, const char* name, std::vector<std::int64_t>& shape,
                  std::vector<std::int64_t>& strides) {
  if (t.ndim < 0 || t.ndim > SKETCHCORE_MAX_NDIM) {
    detail::fail<shape_error>(op, field(name, "ndim"), "a rank from 0 to " + std::to_string(SKETCHCORE_MAX_NDIM),
                              std::to_string(t.ndim));
  }
  if (t.ndim > 0) require(t.shape, op, field(name, "shape").c_str());
  shape.assign(t.shape, t.shape + t.ndim);
  bool empty = false;
  for (std::int32_t d = 0; d < t.ndim; ++d) {
    if (shape[d] < 0) {
      detail::fail<shape_error>(op, field(name, "shape") + "[" + std::to_string(d) + "]", "an extent >= 0",
                                std::to_string(shape[d]));
    }
    empty = empty || shape[d] == 0;
  }
  if (t.strides != nullptr) strides.assign(t.strides, t.strides + t.ndim);
  if (t.data == nullptr && !empty) {
    throw null_pointer_error(detail::argument_message(op, field(name, "data"),
                                                      "a non-null pointer (the tensor has elements)", "NULL"));
  }
}

}  // namespace

void set_last_error(const std::string& message) noexcept {
  try {
    last_error = message;
  } catch (...) {
    last_error.clear();  // no memory for the message: an empty one rather than a throw
  }
}

sketchcore_status status_of_current_exception() noexcept {
  sketchcore_status status = SKETCHCORE_ERROR_INTERNAL;
  const char* what = "unknown C++ exception";
  try {
    throw;
  } catch (const null_pointer_error& e) {
    status = SKETCHCORE_ERROR_NULL_POINTER, what = e.what();
  } catch (const shape_error& e) {
    status = SKETCHCORE_ERROR_SHAPE, what = e.what();
  } catch (const dtype_error& e) {
    status = SKETCHCORE_ERROR_DTYPE, what = e.what();
  } catch (const device_error& e) {
    status = SKETCHCORE_ERROR_DEVICE, what = e.what();
  } catch (const std::bad_alloc& e) {  // also memory.hpp's out_of_memory
    status = SKETCHCORE_ERROR_OUT_OF_MEMORY, what = e.what();
  } catch (const std::length_error& e) {  // a temporary larger than a container can hold
    status = SKETCHCORE_ERROR_OUT_OF_MEMORY, what = e.what();
  } catch (const cuda_error& e) {
    status = SKETCHCORE_ERROR_CUDA, what = e.what();
  } catch (const unverified_path_error& e) {
    status = SKETCHCORE_ERROR_UNVERIFIED_PATH, what = e.what();
  } catch (const std::invalid_argument& e) {
    status = SKETCHCORE_ERROR_INVALID_ARGUMENT, what = e.what();
  } catch (const std::out_of_range& e) {
    status = SKETCHCORE_ERROR_INVALID_ARGUMENT, what = e.what();
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  set_last_error(what);
  return status;
}

void require(const void* p, const char* op, const char* name) {
  if (p == nullptr) throw null_pointer_error(detail::argument_message(op, name, "a non-null pointer", "NULL"));
}

TensorView to_view(const sketchcore_tensor* t, const char* op, const char* name) {
  require(t, op, name);
  const DType dtype = dtype_of(t->dtype, op, field(name, "dtype"));
  const Device device = device_of(*t, op, name);
  std::vector<std::int64_t> shape, strides;
  read_extents(*t, op, name, shape, strides);
  try {
    return TensorView(t->data, dtype, std::move(shape), std::move(strides), device);
  } catch (const shape_error& e) {  // overflowing extents or strides: say which argument
    throw shape_error(std::string(op) + ": " + name + ": " + e.what());
  }
}

Matrix to_matrix(const sketchcore_tensor* t, std::int32_t dtype, int ndim, const char* op, const char* name) {
  require(t, op, name);
  if (t->dtype != dtype) {
    const std::string expected = dtype == SKETCHCORE_INT8 ? "SKETCHCORE_INT8 (4)" : "SKETCHCORE_FLOAT32 (2)";
    detail::fail<dtype_error>(op, field(name, "dtype"), expected, std::to_string(t->dtype));
  }
  if (t->device_type != SKETCHCORE_CPU || t->device_index != 0) {
    detail::fail<device_error>(op, field(name, "device_type"), "a CPU array (SKETCHCORE_CPU, index 0)",
                               "device type " + std::to_string(t->device_type) + " index " +
                                   std::to_string(t->device_index));
  }
  if (t->ndim != ndim) {
    detail::fail<shape_error>(op, field(name, "ndim"), std::to_string(ndim), std::to_string(t->ndim));
  }
  std::vector<std::int64_t> shape, strides;
  read_extents(*t, op, name, shape, strides);
  try {  // the element count and the farthest offset must fit in 64 bits (TensorView checks both)
    (void)TensorView(t->data, DType::float32, shape, strides);
  } catch (const shape_error& e) {
    throw shape_error(std::string(op) + ": " + name + ": " + e.what());
  }
  Matrix m;
  m.data = t->data;
  m.rows = shape[0];
  m.cols = ndim == 2 ? shape[1] : 1;
  m.row_stride = strides.empty() ? m.cols : strides[0];
  m.col_stride = strides.empty() ? 1 : (ndim == 2 ? strides[1] : 0);
  return m;
}

Epilogue to_epilogue(const sketchcore_epilogue* e, const char* op) {
  Epilogue epilogue;
  if (e == nullptr) return epilogue;
  const auto activation = [&](std::int32_t code, const char* name) {
    const std::vector<Activation> all = all_activations();
    if (code < 0 || code >= static_cast<std::int32_t>(all.size())) {
      detail::fail<std::invalid_argument>(op, name, "a sketchcore_activation code 0 to " +
                                                        std::to_string(all.size() - 1), std::to_string(code));
    }
    return all[static_cast<std::size_t>(code)];
  };
  epilogue.scale = e->scale;
  epilogue.activation = activation(e->activation, "epilogue.activation");
  epilogue.inner_activation = activation(e->inner_activation, "epilogue.inner_activation");
  epilogue.dropout_p = e->dropout_p;
  epilogue.seed = e->seed;
  if (e->bias != nullptr) epilogue.bias = to_view(e->bias, op, "epilogue.bias");
  return epilogue;
}

void write_shape(const std::vector<std::int64_t>& shape, std::int64_t* out, std::int32_t capacity,
                 std::int32_t* ndim, const char* op) {
  require(out, op, "shape");
  require(ndim, op, "ndim");
  if (capacity < static_cast<std::int32_t>(shape.size())) {
    detail::fail<shape_error>(op, "capacity", "at least " + std::to_string(shape.size()) + " (the result's rank)",
                              std::to_string(capacity));
  }
  for (std::size_t d = 0; d < shape.size(); ++d) out[d] = shape[d];
  *ndim = static_cast<std::int32_t>(shape.size());
}

}  // namespace sketchcore::c_api

extern "C" const char* sketchcore_last_error(void) { return sketchcore::c_api::last_error.c_str(); }
