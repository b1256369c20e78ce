#include "sketchcore/errors.hpp"

namespace sketchcore {

shape_error::shape_error(const std::string& message) : std::invalid_argument(message) {}
dtype_error::dtype_error(const std::string& message) : std::invalid_argument(message) {}
device_error::device_error(const std::string& message) : std::invalid_argument(message) {}
cuda_error::cuda_error(const std::string& message) : std::runtime_error(message) {}

}  // namespace sketchcore
