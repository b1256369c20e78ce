// The calling thread's execution options (a thread-local, set by ExecutionScope).
#include "sketchcore/execution.hpp"

namespace sketchcore {

namespace {
thread_local ExecutionOptions current_options;
}  // namespace

ExecutionOptions current_execution() noexcept { return current_options; }

ExecutionScope::ExecutionScope(const ExecutionOptions& options) noexcept : previous_(current_options) {
  current_options = options;
}

ExecutionScope::~ExecutionScope() { current_options = previous_; }

}  // namespace sketchcore
