// Shared pieces of the C ABI's implementation (private): the guard that turns every C++ exception
// into a sketchcore_status and the thread's last-error message, and the checked conversion of a
// sketchcore_tensor into a TensorView.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "sketchcore/epilogue.hpp"
#include "sketchcore/sketchcore.h"
#include "sketchcore/tensor.hpp"

namespace sketchcore::c_api {

/// A required pointer was NULL (mapped to SKETCHCORE_ERROR_NULL_POINTER).
class null_pointer_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// Records `message` as the calling thread's last error.
void set_last_error(const std::string& message) noexcept;

/// The status of the exception being handled (call inside a catch block); records its message.
sketchcore_status status_of_current_exception() noexcept;

/// Runs `body` and returns SKETCHCORE_OK, or the status of whatever it threw; never throws.
template <class Body>
sketchcore_status guarded(Body&& body) noexcept {
  try {
    body();
    set_last_error("");
    return SKETCHCORE_OK;
  } catch (...) {
    return status_of_current_exception();
  }
}

/// Throws null_pointer_error "op: name: expected a non-null pointer, got NULL" when `p` is null.
void require(const void* p, const char* op, const char* name);

/// The TensorView of `t` after checking the pointer, dtype and device codes, rank, shape and
/// strides (int8 is refused: TensorView has no int8). Messages name `name` and its field.
TensorView to_view(const sketchcore_tensor* t, const char* op, const char* name);

/// A checked 2-D int8 (or, with dtype float32, any 2-D/1-D) CPU array as data + extents + strides.
struct Matrix {
  void* data = nullptr;
  std::int64_t rows = 0, cols = 1;
  std::int64_t row_stride = 0, col_stride = 0;
};

/// Checks `t` as a CPU array of dtype `dtype` and rank `ndim` (1 or 2) and returns its layout.
Matrix to_matrix(const sketchcore_tensor* t, std::int32_t dtype, int ndim, const char* op, const char* name);

/// The C++ Epilogue of `e` (defaults for NULL), with its codes and bias checked.
Epilogue to_epilogue(const sketchcore_epilogue* e, const char* op);

/// Writes `shape` into the caller's (shape, capacity, ndim) triple, checking room and pointers.
void write_shape(const std::vector<std::int64_t>& shape, std::int64_t* out, std::int32_t capacity,
                 std::int32_t* ndim, const char* op);

}  // namespace sketchcore::c_api
