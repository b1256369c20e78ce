// Times every algorithm cuBLASLt's heuristic offers for the GEMMs of the headline GPU benchmark
// (bf16, x 8192×4096, T·k = 256, W 4096×4096) and prints which one the heuristic ranks first
// against the fastest. Decides whether sketchcore should time candidates (autotune) rather
// than take the heuristic's first answer. Standalone: links cuBLASLt directly, not sketchcore.
//
//   nvcc -O2 -std=c++17 -arch=sm_90 bench/gpu/lt_algos.cu -lcublasLt -o /tmp/lt_algos && /tmp/lt_algos
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK_CUDA(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); std::exit(1); } } while (0)
#define CHECK_LT(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { \
  std::printf("cuBLASLt status %d at %s:%d\n", static_cast<int>(s_), __FILE__, __LINE__); std::exit(1); } } while (0)

namespace {

__global__ void fill_random(__nv_bfloat16* p, long n, unsigned seed) {
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n; i += long(gridDim.x) * blockDim.x) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    p[i] = __float2bfloat16((h & 0xffff) / 32768.0f - 1.0f);
  }
}

struct Problem {
  const char* name;
  int m, n, k;          // row-major C (m×n) = A (m×k) · B (k×n)
  bool relu_bias;
};

__nv_bfloat16* random_buffer(long count, unsigned seed) {
  __nv_bfloat16* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, count * sizeof(__nv_bfloat16)));
  fill_random<<<1024, 256>>>(p, count, seed);
  CHECK_CUDA(cudaGetLastError());
  return p;
}

void run(cublasLtHandle_t handle, const Problem& p, void* workspace, size_t workspace_bytes) {
  // Row-major C = A·B is column-major Cᵀ (n×m) = Bᵀ (n×k) · Aᵀ (k×m), the same memory.
  __nv_bfloat16* a = random_buffer(long(p.m) * p.k, 1);
  __nv_bfloat16* b = random_buffer(long(p.k) * p.n, 2);
  __nv_bfloat16* c = random_buffer(long(p.m) * p.n, 3);
  __nv_bfloat16* bias = random_buffer(p.n, 4);

  cublasLtMatmulDesc_t desc;
  CHECK_LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasLtEpilogue_t epilogue = p.relu_bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  if (p.relu_bias) {
    const void* bias_ptr = bias;
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)));
  }
  cublasLtMatrixLayout_t la, lb, lc;
  CHECK_LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, p.n, p.k, p.n));
  CHECK_LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, p.k, p.m, p.k));
  CHECK_LT(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, p.n, p.m, p.n));
  cublasLtMatmulPreference_t pref;
  CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
  CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                                sizeof(workspace_bytes)));
  constexpr int kWanted = 32;
  cublasLtMatmulHeuristicResult_t results[kWanted];
  int returned = 0;
  CHECK_LT(cublasLtMatmulAlgoGetHeuristic(handle, desc, la, lb, lc, lc, pref, kWanted, results, &returned));

  const float alpha = 1.0f, beta = 0.0f;
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  const double flops = 2.0 * p.m * p.n * p.k;
  std::printf("\n%s: %d×%d·%d×%d%s, %d candidates\n", p.name, p.m, p.k, p.k, p.n, p.relu_bias ? " +bias+relu" : "",
              returned);
  float first_ms = 0, best_ms = 1e30f;
  int best = -1;
  for (int i = 0; i < returned; ++i) {
    auto launch = [&] {
      return cublasLtMatmul(handle, desc, &alpha, b, la, a, lb, &beta, c, lc, c, lc, &results[i].algo, workspace,
                            workspace_bytes, 0);
    };
    if (launch() != CUBLAS_STATUS_SUCCESS) { std::printf("  #%2d launch failed\n", i); continue; }
    for (int w = 0; w < 5; ++w) CHECK_LT(launch());
    std::vector<float> samples;
    for (int rep = 0; rep < 7; ++rep) {
      constexpr int kCalls = 20;
      CHECK_CUDA(cudaEventRecord(start));
      for (int call = 0; call < kCalls; ++call) CHECK_LT(launch());
      CHECK_CUDA(cudaEventRecord(stop));
      CHECK_CUDA(cudaEventSynchronize(stop));
      float ms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
      samples.push_back(ms / kCalls);
    }
    std::sort(samples.begin(), samples.end());
    const float median = samples[samples.size() / 2];
    if (i == 0) first_ms = median;
    if (median < best_ms) { best_ms = median; best = i; }
    std::printf("  #%2d %8.1f us  %6.1f TFLOP/s  spread %.1f-%.1f us  workspace %zu\n", i, median * 1e3,
                flops / (median * 1e-3) / 1e12, samples.front() * 1e3, samples.back() * 1e3,
                results[i].workspaceSize);
  }
  std::printf("  heuristic first %.1f us, fastest #%d %.1f us: first/fastest = %.3f\n", first_ms * 1e3, best,
              best_ms * 1e3, first_ms / best_ms);
  CHECK_CUDA(cudaGetLastError());
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatmulDescDestroy(desc);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(a); cudaFree(b); cudaFree(c); cudaFree(bias);
}

}  // namespace

int main() {
  cublasLtHandle_t handle;
  CHECK_LT(cublasLtCreate(&handle));
  size_t workspace_bytes = size_t{32} << 20;
  void* workspace = nullptr;
  CHECK_CUDA(cudaMalloc(&workspace, workspace_bytes));
  const Problem problems[] = {
      {"x@S (sketch)", 8192, 256, 4096, false},
      {"(xS)@U +bias+relu", 8192, 4096, 256, true},
      {"(xS)@U plain", 8192, 4096, 256, false},
      {"dense x@W +bias+relu", 8192, 4096, 4096, true},
  };
  for (const Problem& p : problems) run(handle, p, workspace, workspace_bytes);
  cudaFree(workspace);
  cublasLtDestroy(handle);
  return 0;
}
