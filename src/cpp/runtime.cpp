#include "sketchcore/runtime.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <thread>
#include <vector>

#include "detail/blas.hpp"
#include "detail/check.hpp"
#include "detail/cuda_probe.hpp"
#include "detail/parallel.hpp"
#include "sketchcore/version.hpp"

namespace sketchcore {

namespace {

int default_num_threads() noexcept {
  if (const char* env = std::getenv("SKETCHCORE_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n >= 1) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

std::atomic<int>& thread_setting() noexcept {
  static std::atomic<int> setting{default_num_threads()};
  return setting;
}

}  // namespace

void set_num_threads(int num_threads) {
  if (num_threads < 1) {
    detail::fail<std::invalid_argument>("set_num_threads", "num_threads", "an integer ≥ 1",
                                        std::to_string(num_threads));
  }
  thread_setting().store(num_threads);
  detail::blas_set_num_threads(num_threads);
}

int get_num_threads() noexcept { return thread_setting().load(); }

BuildInfo build_info() {
  BuildInfo info;
  info.version = SKETCHCORE_VERSION_STRING;
  info.blas = detail::blas_provider();
  info.cuda = detail::cuda_compiled();
  info.cuda_runtime_version = detail::cuda_runtime_version();
  return info;
}

namespace detail {

int current_num_threads() noexcept { return get_num_threads(); }

void parallel_for(std::int64_t n, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& body) {
  if (n <= 0) return;
  const std::int64_t max_chunks = std::max<std::int64_t>(1, n / std::max<std::int64_t>(grain, 1));
  const std::int64_t chunks = std::min<std::int64_t>(current_num_threads(), max_chunks);
  if (chunks <= 1) {
    body(0, n);
    return;
  }
  const std::int64_t step = (n + chunks - 1) / chunks;
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(chunks));
  std::vector<std::thread> workers;
  workers.reserve(static_cast<std::size_t>(chunks - 1));
  for (std::int64_t c = 1; c < chunks; ++c) {
    const std::int64_t begin = c * step, end = std::min(n, begin + step);
    if (begin >= end) break;
    workers.emplace_back([&, c, begin, end] {
      try {
        body(begin, end);
      } catch (...) {
        errors[static_cast<std::size_t>(c)] = std::current_exception();
      }
    });
  }
  try {
    body(0, std::min(n, step));
  } catch (...) {
    errors[0] = std::current_exception();
  }
  for (auto& w : workers) w.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace detail
}  // namespace sketchcore
