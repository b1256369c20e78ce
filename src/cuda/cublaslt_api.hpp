// The part of cuBLASLt's C API that sketchcore uses, declared here and resolved at run
// time with dlopen (cublaslt_api.cu). Why not include <cublasLt.h> and link: the header and
// library ship with the CUDA toolkit's cuBLAS component or the `nvidia-cublas` wheel, not
// with nvcc; declaring the few entry points ourselves lets every machine with nvcc build the
// backend, and a library built with it still loads (and runs on the CPU) where cuBLASLt is
// absent. The values below are those of cuBLASLt's public ABI (CUDA 12 and 13).
#pragma once

#include <cstddef>
#include <cstdint>

namespace sketchcore::cuda::lt {

using Status = int;  // cublasStatus_t
constexpr Status kSuccess = 0;

struct Context;        // opaque cublasLtContext
struct MatmulDescStorage;
struct LayoutStorage;
struct PreferenceStorage;
using Handle = Context*;
using MatmulDesc = MatmulDescStorage*;
using Layout = LayoutStorage*;
using Preference = PreferenceStorage*;

/// cublasLtMatmulAlgo_t: 64 opaque bytes.
struct Algo {
  std::uint64_t data[8];
};

/// cublasLtMatmulHeuristicResult_t.
struct HeuristicResult {
  Algo algo;
  std::size_t workspace_size;
  Status state;
  float waves_count;
  int reserved[4];
};
// The sizes of cuBLASLt's own structs (64 and 96 bytes on every 64-bit platform): a mismatch
// would corrupt the heuristic results it writes.
static_assert(sizeof(Algo) == 64, "cublasLtMatmulAlgo_t is 8 uint64_t");
static_assert(sizeof(HeuristicResult) == 96, "cublasLtMatmulHeuristicResult_t is 96 bytes");

// cudaDataType_t
enum DataType : int { kR16F = 2, kR16BF = 14, kR32F = 0, kR64F = 1, kR8I = 3, kR32I = 10, kR8FE4M3 = 28 };
// cublasComputeType_t
enum ComputeType : int { kCompute32F = 68, kCompute32FFastTF32 = 77, kCompute64F = 70, kCompute32I = 72 };
// cublasOperation_t
enum Operation : std::int32_t { kOpN = 0, kOpT = 1 };
// cublasLtMatmulDescAttributes_t
enum DescAttribute : int {
  kDescTransA = 3,
  kDescTransB = 4,
  kDescEpilogue = 7,
  kDescBiasPointer = 8,
  kDescBiasDataType = 26,
};
// cublasLtEpilogue_t
enum Epilogue : std::uint32_t {
  kEpilogueDefault = 1,
  kEpilogueRelu = 2,
  kEpilogueBias = 4,
  kEpilogueReluBias = 2 | 4,
  kEpilogueGelu = 32,  // the tanh approximation
  kEpilogueGeluBias = 32 | 4,
};
// cublasLtMatmulPreferenceAttributes_t
enum PreferenceAttribute : int {
  kPrefMaxWorkspaceBytes = 1,
  kPrefMinAlignmentA = 5,
  kPrefMinAlignmentB = 6,
  kPrefMinAlignmentC = 7,
  kPrefMinAlignmentD = 8,
};

/// Entry points, resolved from libcublasLt.so by api().
struct Api {
  Status (*create)(Handle*);
  Status (*matmul_desc_create)(MatmulDesc*, int compute_type, int scale_type);
  Status (*matmul_desc_destroy)(MatmulDesc);
  Status (*matmul_desc_set_attribute)(MatmulDesc, int attribute, const void* buffer, std::size_t size);
  Status (*matrix_layout_create)(Layout*, int type, std::uint64_t rows, std::uint64_t cols, std::int64_t ld);
  Status (*matrix_layout_destroy)(Layout);
  Status (*preference_create)(Preference*);
  Status (*preference_destroy)(Preference);
  Status (*preference_set_attribute)(Preference, int attribute, const void* buffer, std::size_t size);
  Status (*algo_get_heuristic)(Handle, MatmulDesc, Layout, Layout, Layout, Layout, Preference, int requested,
                               HeuristicResult* results, int* returned);
  Status (*matmul)(Handle, MatmulDesc, const void* alpha, const void* A, Layout, const void* B, Layout,
                   const void* beta, const void* C, Layout, void* D, Layout, const Algo*, void* workspace,
                   std::size_t workspace_size, void* stream);
  const char* (*status_name)(Status);
};

/// The loaded API. The first call loads cuBLASLt of this build's CUDA major version
/// (libcublasLt.so.13 for a CUDA 13 build, .12 for CUDA 12), searching in this order:
///  1. $SKETCHCORE_CUBLASLT: the library file, or a directory holding it (nothing else is tried);
///  2. the dynamic loader's search by soname: a copy already loaded (the Python package loads the
///     one it found, python/sketchcore/_cublaslt.py; torch or CuPy may have loaded one),
///     LD_LIBRARY_PATH, the ldconfig cache;
///  3. NVIDIA's pip package installed beside this library's Python package
///     (site-packages/nvidia/cu13/lib, or nvidia/cublas/lib for CUDA 12);
///  4. the CUDA toolkit: $CUDA_HOME/lib64, $CUDA_PATH/lib64, /usr/local/cuda/lib64.
/// @throws cuda_error naming what was tried and the pip package to install when none loads,
///         or when a symbol is missing
const Api& api();

/// Throws device_error naming `what` and cuBLASLt's status when `status` is not success.
void check(Status status, const char* what);

}  // namespace sketchcore::cuda::lt
