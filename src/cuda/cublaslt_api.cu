#include "cublaslt_api.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "sketchcore/errors.hpp"

namespace sketchcore::cuda::lt {

namespace {

template <class Fn>
void resolve(void* library, const char* symbol, Fn& slot) {
  void* address = dlsym(library, symbol);
  if (!address) throw cuda_error(std::string("sketchcore: cuBLASLt has no symbol ") + symbol);
  slot = reinterpret_cast<Fn>(address);
}

Api load() {
  void* library = nullptr;
  std::string tried;
  if (const char* path = std::getenv("SKETCHCORE_CUBLASLT")) {
    library = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    tried = path;
  } else {
    for (const char* name : {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"}) {
      library = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
      tried += tried.empty() ? name : std::string(", ") + name;
      if (library) break;
    }
  }
  if (!library) {
    const char* reason = dlerror();
    throw cuda_error("sketchcore: the CUDA backend needs cuBLASLt: could not load " + tried + " (" +
                     (reason ? reason : "not found") +
                     "); install the CUDA toolkit's cuBLAS or `pip install nvidia-cublas`, or set SKETCHCORE_CUBLASLT");
  }
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
