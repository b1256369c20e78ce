#include "sketchcore/errors.hpp"

namespace sketchcore {

// The one out-of-line member of each exception type: its vtable and type_info live in
// libsketchcore, so a `catch` in an application matches what the library throws.
shape_error::~shape_error() = default;
dtype_error::~dtype_error() = default;
device_error::~device_error() = default;
cuda_error::~cuda_error() = default;
unverified_path_error::~unverified_path_error() = default;

}  // namespace sketchcore
