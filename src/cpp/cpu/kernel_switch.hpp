// The environment switches that turn a CPU kernel family off (SKETCHCORE_BF16_GEMM=0,
// SKETCHCORE_AVX512_ACTIVATIONS=0): read once by each family's availability check.
#pragma once

#include <cstdlib>
#include <cstring>

namespace sketchcore::detail {

/// Whether the environment variable `name` is set to "0".
inline bool switched_off(const char* name) noexcept {
  const char* setting = std::getenv(name);
  return setting != nullptr && std::strcmp(setting, "0") == 0;
}

}  // namespace sketchcore::detail
