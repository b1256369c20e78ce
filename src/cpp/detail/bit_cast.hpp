// The bits of a value as another type of the same size (std::bit_cast before C++20).
#pragma once

#include <cstring>
#include <type_traits>

namespace sketchcore::detail {

template <class To, class From>
inline To bit_cast(const From& from) noexcept {
  static_assert(sizeof(To) == sizeof(From) && std::is_trivially_copyable_v<To> && std::is_trivially_copyable_v<From>,
                "bit_cast: expected trivially copyable types of the same size");
  To to;
  std::memcpy(&to, &from, sizeof to);
  return to;
}

}  // namespace sketchcore::detail
