/// @file errors.hpp
/// @brief Exception types thrown by the sketchcore API.
///
/// Every exception derives from a standard one, so generic handlers keep working; the
/// Python bindings map them to ValueError (shape_error and other std::invalid_argument),
/// TypeError (dtype_error, device_error), MemoryError (std::bad_alloc) and RuntimeError
/// (cuda_error, unverified_path_error and anything else).
/// Messages name the operation, the argument, the expected and the actual value.
#pragma once

#include <stdexcept>
#include <string>

#include "sketchcore/export.hpp"

namespace sketchcore {

/// An argument has the wrong number of dimensions, a mismatching extent, or a layout that
/// the operation cannot use (for example an output that overlaps an input).
class SKETCHCORE_API shape_error : public std::invalid_argument {
 public:
  /// Creates the error with a complete, human-readable message (std::string or const char*).
  using std::invalid_argument::invalid_argument;
  ~shape_error() override;  ///< out of line: anchors the type's identity in libsketchcore
};

/// An argument has an unsupported element type, or the arguments' element types differ.
class SKETCHCORE_API dtype_error : public std::invalid_argument {
 public:
  /// Creates the error with a complete, human-readable message (std::string or const char*).
  using std::invalid_argument::invalid_argument;
  ~dtype_error() override;  ///< out of line: anchors the type's identity in libsketchcore
};

/// An argument lives on an unsupported device, or the arguments live on different devices.
class SKETCHCORE_API device_error : public std::invalid_argument {
 public:
  /// Creates the error with a complete, human-readable message (std::string or const char*).
  using std::invalid_argument::invalid_argument;
  ~device_error() override;  ///< out of line: anchors the type's identity in libsketchcore
};

/// A CUDA runtime or cuBLASLt call failed (no device, a launch error, a library that could
/// not be loaded); the message names the call and the CUDA error.
class SKETCHCORE_API cuda_error : public std::runtime_error {
 public:
  /// Creates the error with a complete, human-readable message (std::string or const char*).
  using std::runtime_error::runtime_error;
  ~cuda_error() override;  ///< out of line: anchors the type's identity in libsketchcore
};

/// A call would take a code path that has not yet passed its tests on a device and is not
/// opted into (gated_paths.hpp); the message names the path and how to open it.
class SKETCHCORE_API unverified_path_error : public std::runtime_error {
 public:
  /// Creates the error with a complete, human-readable message (std::string or const char*).
  using std::runtime_error::runtime_error;
  ~unverified_path_error() override;  ///< out of line: anchors the type's identity in libsketchcore
};

}  // namespace sketchcore
