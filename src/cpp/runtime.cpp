#include "sketchcore/runtime.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

#include "cpu/activation_isa.hpp"
#include "cpu/gemm_bf16.hpp"
#include "detail/blas.hpp"
#include "detail/check.hpp"
#include "detail/backend.hpp"
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
  const detail::Backend* cuda = detail::cuda_backend();
  info.cuda = cuda != nullptr;
  info.cuda_runtime_version = cuda ? cuda->runtime_version() : 0;
  info.cpu_bf16_gemm = detail::gemm_bf16_available();
  info.cpu_bf16_amx = detail::gemm_bf16_amx_enabled();
  info.cpu_activation_kernels = detail::activation_isa_name(detail::activation_isa());
  return info;
}

int cuda_device_count() noexcept {
  const detail::Backend* cuda = detail::cuda_backend();
  return cuda ? cuda->device_count() : 0;
}

namespace detail {

int current_num_threads() noexcept { return get_num_threads(); }

}  // namespace detail
}  // namespace sketchcore
