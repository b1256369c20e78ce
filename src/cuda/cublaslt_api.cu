#include "cublaslt_api.hpp"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "sketchcore/errors.hpp"

#ifndef SKETCHCORE_CUDA_MAJOR
#error "SKETCHCORE_CUDA_MAJOR (the toolkit's major version) is set by cmake/SketchcoreCuda.cmake"
#endif
#define SKETCHCORE_STR2(x) #x
#define SKETCHCORE_STR(x) SKETCHCORE_STR2(x)

namespace sketchcore::cuda::lt {

namespace {

// The soname of this build's major version, and where NVIDIA's pip package puts it.
constexpr const char* kSoname = "libcublasLt.so." SKETCHCORE_STR(SKETCHCORE_CUDA_MAJOR);
#if SKETCHCORE_CUDA_MAJOR >= 13
constexpr const char* kPipDir = "nvidia/cu13/lib";
constexpr const char* kPipInstall = "pip install \"nvidia-cublas>=13,<14\"";
#else
constexpr const char* kPipDir = "nvidia/cublas/lib";
constexpr const char* kPipInstall = "pip install nvidia-cublas-cu" SKETCHCORE_STR(SKETCHCORE_CUDA_MAJOR);
#endif

bool is_directory(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

// The site-packages directory two levels above this library (sketchcore/lib/libsketchcore.so in
// a wheel), or "" when the library is not where a wheel puts it.
std::string site_packages_of_this_library() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&is_directory), &info) == 0 || !info.dli_fname) return "";
  std::string path = info.dli_fname;
  for (int up = 0; up < 3; ++up) {
    const auto slash = path.rfind('/');
    if (slash == std::string::npos) return "";
    path.resize(slash);
  }
  return path;
}

// Candidates after $SKETCHCORE_CUBLASLT, in order: the soname, then full paths.
std::vector<std::string> candidates() {
  std::vector<std::string> names{kSoname};
  const std::string site = site_packages_of_this_library();
  if (!site.empty()) names.push_back(site + "/" + kPipDir + "/" + kSoname);
  for (const char* variable : {"CUDA_HOME", "CUDA_PATH"}) {
    const char* root = std::getenv(variable);
    if (root && *root) names.push_back(std::string(root) + "/lib64/" + kSoname);
  }
  names.push_back(std::string("/usr/local/cuda/lib64/") + kSoname);
  return names;
}

template <class Fn>
void resolve(void* library, const char* symbol, Fn& slot) {
  void* address = dlsym(library, symbol);
  if (!address) throw cuda_error(std::string("sketchcore: cuBLASLt has no symbol ") + symbol);
  slot = reinterpret_cast<Fn>(address);
}

void* open_library() {
  std::string tried;
  const char* reason = nullptr;
  if (const char* path = std::getenv("SKETCHCORE_CUBLASLT"); path && *path) {
    std::string file = path;
    if (is_directory(file)) file += std::string("/") + kSoname;
    if (void* library = dlopen(file.c_str(), RTLD_NOW | RTLD_GLOBAL)) return library;
    reason = dlerror();
    throw cuda_error("sketchcore: SKETCHCORE_CUBLASLT: expected cuBLASLt (" + std::string(kSoname) +
                     ") or a directory holding it, could not load " + file + " (" +
                     (reason ? reason : "not found") + ")");
  }
  for (const std::string& name : candidates()) {
    if (void* library = dlopen(name.c_str(), RTLD_NOW | RTLD_GLOBAL)) return library;
    reason = dlerror();
    tried += (tried.empty() ? "" : ", ") + name;
  }
  throw cuda_error(std::string("sketchcore: the CUDA backend (CUDA ") + SKETCHCORE_STR(SKETCHCORE_CUDA_MAJOR) +
                   ") needs cuBLASLt and found none (tried " + tried + "; last error: " +
                   (reason ? reason : "not found") + "): " + kPipInstall +
                   ", or install the CUDA toolkit's cuBLAS, or set SKETCHCORE_CUBLASLT to the library's path");
}

Api load() {
  void* library = open_library();
  Api api{};
  resolve(library, "cublasLtCreate", api.create);
  resolve(library, "cublasLtMatmulDescCreate", api.matmul_desc_create);
  resolve(library, "cublasLtMatmulDescDestroy", api.matmul_desc_destroy);
  resolve(library, "cublasLtMatmulDescSetAttribute", api.matmul_desc_set_attribute);
  resolve(library, "cublasLtMatrixLayoutCreate", api.matrix_layout_create);
  resolve(library, "cublasLtMatrixLayoutDestroy", api.matrix_layout_destroy);
  resolve(library, "cublasLtMatmulPreferenceCreate", api.preference_create);
  resolve(library, "cublasLtMatmulPreferenceDestroy", api.preference_destroy);
  resolve(library, "cublasLtMatmulPreferenceSetAttribute", api.preference_set_attribute);
  resolve(library, "cublasLtMatmulAlgoGetHeuristic", api.algo_get_heuristic);
  resolve(library, "cublasLtMatmul", api.matmul);
  resolve(library, "cublasLtGetStatusName", api.status_name);
  return api;
}

}  // namespace

const Api& api() {
  // Loaded once; a failure is retried on the next call (the user may install the library).
  static std::mutex mutex;
  static Api loaded{};
  static bool ready = false;
  std::lock_guard<std::mutex> lock(mutex);
  if (!ready) {
    loaded = load();
    ready = true;
  }
  return loaded;
}

void check(Status status, const char* what) {
  if (status == kSuccess) return;
  const char* name = api().status_name ? api().status_name(status) : nullptr;
  throw cuda_error(std::string("sketchcore: ") + what + " failed: " + (name ? name : "cuBLASLt status ") +
                   (name ? "" : std::to_string(status)));
}

}  // namespace sketchcore::cuda::lt
