#include "lt_gemm.cuh"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "cublaslt_api.hpp"
#include "cuda_common.cuh"
#include "device_pool.cuh"
#include "sketchcore/errors.hpp"

namespace sketchcore::cuda {

namespace {

constexpr std::size_t kMaxWorkspace = std::size_t{32} << 20;  // cuBLASLt's advice for Hopper
constexpr int kCandidates = 8;       // algorithms timed per shape when tuning (the heuristic's top ones)
constexpr int kTimedRuns = 5;        // event-timed launches of each candidate, after one warm-up

int data_type(DType dtype) {
  switch (dtype) {
    case DType::float16: return lt::kR16F;
    case DType::bfloat16: return lt::kR16BF;
    case DType::float32: return lt::kR32F;
    case DType::float64: return lt::kR64F;
  }
  return lt::kR32F;
}

std::uint32_t epilogue_code(const LtEpilogue& e) {
  const bool bias = e.bias != nullptr;
  switch (e.activation) {
    case Activation::relu: return bias ? lt::kEpilogueReluBias : lt::kEpilogueRelu;
    case Activation::gelu_tanh: return bias ? lt::kEpilogueGeluBias : lt::kEpilogueGelu;
    default: return bias ? lt::kEpilogueBias : lt::kEpilogueDefault;
  }
}

/// Largest power of two ≤ 256 dividing the address: what the algorithm may assume.
std::uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

/// Owns the descriptors of one call.
struct Descriptors {
  lt::MatmulDesc desc = nullptr;
  lt::Layout a = nullptr, b = nullptr, c = nullptr;
  lt::Preference preference = nullptr;
  ~Descriptors() {
    const lt::Api& api = lt::api();
    if (preference) api.preference_destroy(preference);
    if (c) api.matrix_layout_destroy(c);
    if (b) api.matrix_layout_destroy(b);
    if (a) api.matrix_layout_destroy(a);
    if (desc) api.matmul_desc_destroy(desc);
  }
};

/// Everything the heuristic's choice depends on, and whether the plan was tuned.
using PlanKey = std::tuple<int, int, int, std::int64_t, std::int64_t, std::int64_t, bool, bool, std::int64_t,
                           std::int64_t, std::int64_t, std::uint32_t, std::array<std::uint32_t, 4>, bool>;

struct PlanCache {
  std::mutex mutex;
  std::map<PlanKey, lt::HeuristicResult> plans;
};

PlanCache& plan_cache() {
  static PlanCache cache;
  return cache;
}

lt::Handle handle_for(int device) {
  static std::mutex mutex;
  static std::map<int, lt::Handle> handles;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = handles.find(device);
  if (found != handles.end()) return found->second;
  lt::Handle handle = nullptr;
  const RelaxedCaptureMode setup_may_be_captured;
  lt::check(lt::api().create(&handle), "cublasLtCreate");
  handles.emplace(device, handle);
  return handle;
}

template <class V>
void set(lt::MatmulDesc desc, int attribute, const V& value) {
  lt::check(lt::api().matmul_desc_set_attribute(desc, attribute, &value, sizeof(value)), "cublasLtMatmulDescSetAttribute");
}

template <class V>
void set(lt::Preference preference, int attribute, const V& value) {
  lt::check(lt::api().preference_set_attribute(preference, attribute, &value, sizeof(value)),
            "cublasLtMatmulPreferenceSetAttribute");
}

/// A start and a stop event, destroyed with it.
struct Timer {
  cudaEvent_t start = nullptr, stop = nullptr;
  Timer() {
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
  }
  ~Timer() {
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
};

/// The fastest of `candidates` on this machine: each is launched once to warm up, then
/// kTimedRuns times between two events on `stream`; the stream is synchronised once per
/// candidate. A candidate whose launch fails is passed over; the heuristic's first stays
/// the answer if every other one is slower.
template <class Launch>
lt::HeuristicResult fastest_candidate(const std::vector<lt::HeuristicResult>& candidates, cudaStream_t stream,
                                      Launch&& launch) {
  Timer timer;
  std::size_t best = 0;
  float best_ms = -1.0f;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    if (launch(candidates[i]) != lt::kSuccess) continue;
    check(cudaEventRecord(timer.start, stream), "cudaEventRecord");
    bool launched = true;
    for (int run = 0; run < kTimedRuns && launched; ++run) launched = launch(candidates[i]) == lt::kSuccess;
    check(cudaEventRecord(timer.stop, stream), "cudaEventRecord");
    check(cudaEventSynchronize(timer.stop), "cudaEventSynchronize");
    float ms = 0.0f;
    check(cudaEventElapsedTime(&ms, timer.start, timer.stop), "cudaEventElapsedTime");
    if (launched && (best_ms < 0.0f || ms < best_ms)) {
      best_ms = ms;
      best = i;
    }
  }
  return candidates[best];
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(stream, &status), "cudaStreamIsCapturing");
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace

bool lt_supports(DType dtype, Activation activation) noexcept {
  if (dtype == DType::float64) return activation == Activation::none;
  return activation == Activation::none || activation == Activation::relu || activation == Activation::gelu_tanh;
}

void lt_gemm(int device, DType dtype, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
             const DeviceMatrix& a, const DeviceMatrix& b, double beta, void* c, std::int64_t ldc,
             const LtEpilogue& epilogue, bool allow_tf32, cudaStream_t stream) {
  const lt::Api& api = lt::api();
  // cuBLASLt is column-major: row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ, so the
  // column-major problem is (n × m) = B′ (n × k) · A′ (k × m) with B′, A′ the same memory.
  const int type = data_type(dtype);
  const bool is_double = dtype == DType::float64;
  const int compute = is_double ? lt::kCompute64F : (dtype == DType::float32 && allow_tf32 ? lt::kCompute32FFastTF32
                                                                                             : lt::kCompute32F);
  const int scale_type = is_double ? lt::kR64F : lt::kR32F;
  const std::int32_t op_a = b.transposed ? lt::kOpT : lt::kOpN;  // first column-major operand: B
  const std::int32_t op_b = a.transposed ? lt::kOpT : lt::kOpN;
  const std::uint32_t code = epilogue_code(epilogue);

  Descriptors d;
  lt::check(api.matmul_desc_create(&d.desc, compute, scale_type), "cublasLtMatmulDescCreate");
  set(d.desc, lt::kDescTransA, op_a);
  set(d.desc, lt::kDescTransB, op_b);
  set(d.desc, lt::kDescEpilogue, code);
  if (epilogue.bias) {
    set(d.desc, lt::kDescBiasPointer, epilogue.bias);
    const std::int32_t bias_type = type;
    set(d.desc, lt::kDescBiasDataType, bias_type);
  }
  // Column-major shapes of the stored operands: B′ is (n × k) (or k × n stored when op T).
  lt::check(api.matrix_layout_create(&d.a, type, static_cast<std::uint64_t>(b.transposed ? k : n),
                                     static_cast<std::uint64_t>(b.transposed ? n : k), b.ld),
            "cublasLtMatrixLayoutCreate(A)");
  lt::check(api.matrix_layout_create(&d.b, type, static_cast<std::uint64_t>(a.transposed ? m : k),
                                     static_cast<std::uint64_t>(a.transposed ? k : m), a.ld),
            "cublasLtMatrixLayoutCreate(B)");
  lt::check(api.matrix_layout_create(&d.c, type, static_cast<std::uint64_t>(n), static_cast<std::uint64_t>(m), ldc),
            "cublasLtMatrixLayoutCreate(C)");

  const std::array<std::uint32_t, 4> alignments{alignment_of(b.data), alignment_of(a.data), alignment_of(c),
                                                alignment_of(epilogue.bias ? epilogue.bias : c)};
  // Tuning times candidates into C, so only where C is not also an input (beta = 0). Tuned
  // plans are cached apart from the heuristic's.
  const bool tune = current_execution().tune_gemms && beta == 0.0;
  const PlanKey key{device, type, compute, m, n, k, a.transposed, b.transposed, a.ld, b.ld, ldc, code, alignments, tune};
  lt::HeuristicResult plan{};
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(plan_cache().mutex);
    auto found = plan_cache().plans.find(key);
    if (found != plan_cache().plans.end()) {
      plan = found->second;
      cached = true;
    }
  }
  const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
  const void* alpha_p = is_double ? static_cast<const void*>(&alpha) : &alpha_f;
  const void* beta_p = is_double ? static_cast<const void*>(&beta) : &beta_f;
  if (!cached) {
    lt::check(api.preference_create(&d.preference), "cublasLtMatmulPreferenceCreate");
    set(d.preference, lt::kPrefMaxWorkspaceBytes, static_cast<std::uint64_t>(kMaxWorkspace));
    set(d.preference, lt::kPrefMinAlignmentA, alignments[0]);
    set(d.preference, lt::kPrefMinAlignmentB, alignments[1]);
    set(d.preference, lt::kPrefMinAlignmentC, alignments[2]);
    set(d.preference, lt::kPrefMinAlignmentD, alignments[2]);
    // Inside a graph capture nothing may synchronise: an untuned shape there gets the
    // heuristic's plan, not remembered, so that a later eager call still tunes it.
    const bool timing_allowed = !tune || !capturing(stream);
    std::vector<lt::HeuristicResult> candidates(tune && timing_allowed ? kCandidates : 1);
    int returned = 0;
    lt::check(api.algo_get_heuristic(handle_for(device), d.desc, d.a, d.b, d.c, d.c, d.preference,
                                     static_cast<int>(candidates.size()), candidates.data(), &returned),
              "cublasLtMatmulAlgoGetHeuristic");
    if (returned == 0 || candidates[0].state != lt::kSuccess) {
      throw cuda_error("sketchcore: cuBLASLt offers no algorithm for a " + std::to_string(m) + "×" + std::to_string(k) +
                       "·" + std::to_string(k) + "×" + std::to_string(n) + " " + dtype_name(dtype) + " GEMM");
    }
    candidates.resize(static_cast<std::size_t>(returned));
    plan = candidates[0];
    if (candidates.size() > 1) {
      std::size_t most_workspace = 0;
      for (const auto& candidate : candidates) most_workspace = std::max(most_workspace, candidate.workspace_size);
      DeviceBuffer workspace(device, most_workspace, stream);
      plan = fastest_candidate(candidates, stream, [&](const lt::HeuristicResult& candidate) {
        return api.matmul(handle_for(device), d.desc, alpha_p, b.data, d.a, a.data, d.b, beta_p, c, d.c, c, d.c,
                          &candidate.algo, workspace.as<void>(), candidate.workspace_size, stream);
      });
    }
    if (timing_allowed) {
      std::lock_guard<std::mutex> lock(plan_cache().mutex);
      plan_cache().plans.emplace(key, plan);
    }
  }

  DeviceBuffer workspace(device, plan.workspace_size, stream);
  lt::check(api.matmul(handle_for(device), d.desc, alpha_p, b.data, d.a, a.data, d.b, beta_p, c, d.c, c, d.c, &plan.algo,
                       workspace.as<void>(), plan.workspace_size, stream),
            "cublasLtMatmul");
}

namespace {

/// The types of an 8-bit "TN" GEMM: operands, accumulation (compute and scale type), output.
struct EightBitTypes {
  int operand, compute, scale, output;
  const char* name;  // for messages
};

/// d (n × m, leading dimension m) = Σ_c b(r, c) · a(j, c): the int8 and fp8 products (lt_gemm.cuh),
/// which share cuBLASLt's "TN" form; `alpha` and `beta` point to values of the scale type.
void eight_bit_gemm(int device, std::int64_t m, std::int64_t n, std::int64_t k, const void* a, const void* b, void* d,
                    const EightBitTypes& t, const void* alpha, const void* beta, cudaStream_t stream) {
  const lt::Api& api = lt::api();
  const std::string name(t.name);
  // The message names the GEMM's types; built only on a failure (no allocation per call).
  const auto check = [&name](lt::Status status, const char* what) {
    if (status != lt::kSuccess) lt::check(status, (std::string(what) + " (" + name + ")").c_str());
  };
  Descriptors desc;
  check(api.matmul_desc_create(&desc.desc, t.compute, t.scale), "cublasLtMatmulDescCreate");
  set(desc.desc, lt::kDescTransA, static_cast<std::int32_t>(lt::kOpT));
  set(desc.desc, lt::kDescTransB, static_cast<std::int32_t>(lt::kOpN));
  const auto um = static_cast<std::uint64_t>(m), un = static_cast<std::uint64_t>(n), uk = static_cast<std::uint64_t>(k);
  check(api.matrix_layout_create(&desc.a, t.operand, uk, um, k), "cublasLtMatrixLayoutCreate(A)");
  check(api.matrix_layout_create(&desc.b, t.operand, uk, un, k), "cublasLtMatrixLayoutCreate(B)");
  check(api.matrix_layout_create(&desc.c, t.output, um, un, m), "cublasLtMatrixLayoutCreate(D)");

  // The key of the 8-bit plans: the type slot holds the operand type, which no floating-point plan has.
  const PlanKey key{device, t.operand, t.compute, m, n, k, false, false, k, k, m, 0u,
                    std::array<std::uint32_t, 4>{alignment_of(a), alignment_of(b), alignment_of(d), 0u}, false};
  lt::HeuristicResult plan{};
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(plan_cache().mutex);
    auto found = plan_cache().plans.find(key);
    if (found != plan_cache().plans.end()) {
      plan = found->second;
      cached = true;
    }
  }
  if (!cached) {
    lt::check(api.preference_create(&desc.preference), "cublasLtMatmulPreferenceCreate");
    set(desc.preference, lt::kPrefMaxWorkspaceBytes, static_cast<std::uint64_t>(kMaxWorkspace));
    int returned = 0;
    check(api.algo_get_heuristic(handle_for(device), desc.desc, desc.a, desc.b, desc.c, desc.c, desc.preference, 1,
                                 &plan, &returned),
          "cublasLtMatmulAlgoGetHeuristic");
    if (returned == 0 || plan.state != lt::kSuccess) {
      throw cuda_error("sketchcore: cuBLASLt offers no algorithm for a " + std::to_string(n) + "×" + std::to_string(k) +
                       "·" + std::to_string(k) + "×" + std::to_string(m) + " " + name + " GEMM");
    }
    std::lock_guard<std::mutex> lock(plan_cache().mutex);
    plan_cache().plans.emplace(key, plan);
  }
  DeviceBuffer workspace(device, plan.workspace_size, stream);
  check(api.matmul(handle_for(device), desc.desc, alpha, a, desc.a, b, desc.b, beta, d, desc.c, d, desc.c, &plan.algo,
                   workspace.as<void>(), plan.workspace_size, stream),
        "cublasLtMatmul");
}

}  // namespace

void lt_gemm_int8(int device, std::int64_t m, std::int64_t n, std::int64_t k, const std::int8_t* a,
                  const std::int8_t* b, std::int32_t* d, cudaStream_t stream) {
  const std::int32_t alpha = 1, beta = 0;
  eight_bit_gemm(device, m, n, k, a, b, d, EightBitTypes{lt::kR8I, lt::kCompute32I, lt::kR32I, lt::kR32I, "int8"},
                 &alpha, &beta, stream);
}

void lt_gemm_fp8(int device, std::int64_t m, std::int64_t n, std::int64_t k, const std::uint8_t* a,
                 const std::uint8_t* b, float* d, cudaStream_t stream) {
  const float alpha = 1.0f, beta = 0.0f;
  eight_bit_gemm(device, m, n, k, a, b, d,
                 EightBitTypes{lt::kR8FE4M3, lt::kCompute32F, lt::kR32F, lt::kR32F, "fp8 e4m3"}, &alpha, &beta,
                 stream);
}

}  // namespace sketchcore::cuda
