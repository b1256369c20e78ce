/// @file runtime.hpp
/// @brief Process-wide runtime settings (CPU threads) and build information.
#pragma once

#include <string>

#include "sketchcore/export.hpp"

namespace sketchcore {

/// Sets how many CPU threads sketchcore's own loops and its BLAS may use (≥ 1).
/// The default is the number of hardware threads, or $SKETCHCORE_NUM_THREADS if set.
/// @throws std::invalid_argument if `num_threads` < 1
SKETCHCORE_API void set_num_threads(int num_threads);

/// Returns the CPU thread count in effect.
SKETCHCORE_API int get_num_threads() noexcept;

/// Describes how this libsketchcore was built.
struct BuildInfo {
  std::string version;       ///< library version, e.g. "0.1.0"
  std::string blas;          ///< CBLAS provider chosen at build time
  bool cuda = false;         ///< whether the CUDA backend was compiled in
  int cuda_runtime_version = 0;  ///< CUDA runtime version (e.g. 13000), 0 without CUDA
  /// Whether this CPU runs the products of bfloat16 problems whose operands are bfloat16 in a
  /// native bfloat16 GEMM (AVX512_BF16; off with SKETCHCORE_BF16_GEMM=0), rather than widening
  /// them to float32 for BLAS. Same results up to float32 summation order either way, except
  /// that the native GEMM flushes subnormal inputs, products and sums to zero (as VDPBF16PS does).
  bool cpu_bf16_gemm = false;
  /// Whether that native bfloat16 GEMM runs on AMX-BF16 tiles (TDPBF16PS: Intel Sapphire Rapids
  /// on, where the operating system grants the tile state; off with SKETCHCORE_BF16_AMX=0, which
  /// keeps the AVX512_BF16 kernel). Same results up to float32 summation order.
  bool cpu_bf16_amx = false;
  /// Which kernels run the float32 activation epilogues (GELU, GELU-tanh, SiLU and their
  /// derivatives): "avx512" or "avx2" (intrinsic kernels, compiled in on x86-64 GCC/Clang builds,
  /// the best this CPU has) or "portable". SKETCHCORE_CPU_ACTIVATIONS=avx2 or =portable in the
  /// environment caps the choice. All are within 4 ulp of the float64 functions, in different bits.
  std::string cpu_activation_kernels;
};

/// Returns how this library was built.
SKETCHCORE_API BuildInfo build_info();

/// Number of CUDA devices sketchcore can use: 0 without the CUDA backend, without a
/// driver or without a device (never throws).
SKETCHCORE_API int cuda_device_count() noexcept;

}  // namespace sketchcore
