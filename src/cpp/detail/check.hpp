// Private helpers that build the uniform error messages of the public API:
//   "<op>: <argument>: expected <expected>, got <actual>"
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

#include "sketchcore/tensor.hpp"

namespace sketchcore::detail {

inline std::string argument_message(std::string_view op, std::string_view argument,
                                    std::string_view expected, std::string_view actual) {
  std::string m;
  m.reserve(op.size() + argument.size() + expected.size() + actual.size() + 24);
  m.append(op).append(": ").append(argument).append(": expected ").append(expected)
      .append(", got ").append(actual);
  return m;
}

/// Throws `Error` (a std::invalid_argument subclass) with the uniform message.
template <class Error>
[[noreturn]] void fail(std::string_view op, std::string_view argument, std::string_view expected,
                       std::string_view actual) {
  throw Error(argument_message(op, argument, expected, actual));
}

/// The value of `all` whose name_of() is `name`; else throws std::invalid_argument listing
/// the accepted names ("one of 'a', 'b'").
template <class Enum, std::size_t N>
Enum parse_named(std::string_view name, const Enum (&all)[N], const char* (*name_of)(Enum) noexcept,
                 std::string_view op, std::string_view argument) {
  std::string accepted;
  for (Enum value : all) {
    if (name == name_of(value)) return value;
    accepted += accepted.empty() ? "one of " : ", ";
    accepted += std::string("'") + name_of(value) + "'";
  }
  fail<std::invalid_argument>(op, argument, accepted, "'" + std::string(name) + "'");
}

/// "shape (2, 3)" for a view, as the `actual` part of a message.
inline std::string describe_shape(const TensorView& v) { return "shape " + shape_to_string(v.shape()); }

}  // namespace sketchcore::detail
