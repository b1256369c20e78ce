// The C ABI's runtime entry points: build facts, threads, activation names and the epilogue's
// defaults (include/sketchcore/sketchcore.h).
#include <mutex>
#include <set>
#include <string>

#include "c_api/c_api_common.hpp"
#include "sketchcore/epilogue.hpp"
#include "sketchcore/int8_matmul.hpp"
#include "sketchcore/runtime.hpp"
#include "sketchcore/version.hpp"

using sketchcore::c_api::guarded;
using sketchcore::c_api::require;

namespace {

// A string that stays valid for the life of the library (a build fact can change: the int8 family).
const char* interned(const std::string& text) {
  static std::mutex mutex;
  static std::set<std::string> strings;
  const std::lock_guard<std::mutex> lock(mutex);
  return strings.insert(text).first->c_str();
}

}  // namespace

extern "C" {

sketchcore_status sketchcore_get_build_info(sketchcore_build_info* info) {
  return guarded([&] {
    require(info, "sketchcore_get_build_info", "info");
    const sketchcore::BuildInfo b = sketchcore::build_info();
    sketchcore_build_info out{};
    out.version = interned(b.version);
    out.version_major = SKETCHCORE_VERSION_MAJOR;
    out.version_minor = SKETCHCORE_VERSION_MINOR;
    out.version_patch = SKETCHCORE_VERSION_PATCH;
    out.c_abi_version = SKETCHCORE_C_ABI_VERSION;
    out.blas = interned(b.blas);
    out.cuda = b.cuda ? 1 : 0;
    out.cuda_runtime_version = b.cuda_runtime_version;
    out.cpu_bf16_gemm = b.cpu_bf16_gemm ? 1 : 0;
    out.cpu_bf16_amx = b.cpu_bf16_amx ? 1 : 0;
    out.cpu_activation_kernels = interned(b.cpu_activation_kernels);
    out.int8_gemm_isa = interned(sketchcore::int8_gemm_isa());
    *info = out;
  });
}

sketchcore_status sketchcore_set_num_threads(int32_t num_threads) {
  return guarded([&] { sketchcore::set_num_threads(num_threads); });
}

sketchcore_status sketchcore_get_num_threads(int32_t* num_threads) {
  return guarded([&] {
    require(num_threads, "sketchcore_get_num_threads", "num_threads");
    *num_threads = sketchcore::get_num_threads();
  });
}

sketchcore_status sketchcore_cuda_device_count(int32_t* count) {
  return guarded([&] {
    require(count, "sketchcore_cuda_device_count", "count");
    *count = sketchcore::cuda_device_count();
  });
}

sketchcore_status sketchcore_activation_from_name(const char* name, int32_t* activation) {
  return guarded([&] {
    require(name, "sketchcore_activation_from_name", "name");
    require(activation, "sketchcore_activation_from_name", "activation");
    *activation = static_cast<int32_t>(sketchcore::parse_activation(name));
  });
}

sketchcore_status sketchcore_epilogue_init(sketchcore_epilogue* epilogue) {
  return guarded([&] {
    require(epilogue, "sketchcore_epilogue_init", "epilogue");
    *epilogue = sketchcore_epilogue{1.0, nullptr, SKETCHCORE_ACT_NONE, SKETCHCORE_ACT_NONE, 0.0, 0};
  });
}

}  // extern "C"
