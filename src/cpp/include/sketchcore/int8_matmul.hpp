/// @file int8_matmul.hpp
/// @brief The int8 sketched GEMM: y = act(deq(q8(σ(deq(q8(x)·S_q)))·U_q) + bias), and its
/// full-rank peer y = act(deq(q8(x)·W_q) + bias), with int8 factors packed once and activations
/// quantized per row on the fly (int32 accumulation).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sketchcore/epilogue.hpp"
#include "sketchcore/export.hpp"
#include "sketchcore/quantized.hpp"
#include "sketchcore/tensor.hpp"

namespace sketchcore {

/// A k × n matrix of int8 values q[i][j] in [−127, 127] with one float32 scale per column: its
/// value is q[i][j] · scale[j]. The QuantizedFactor of format int8 (quantized.hpp): the codes are
/// stored as that class describes, and packed once, at construction, into the layout of the CPU
/// int8 kernels (panels of 64 columns, four consecutive rows of a column in 4 bytes, with the
/// column sums the kernels' unsigned-activation trick needs; cpu/int8_gemm.hpp), which the
/// factor keeps. Immutable, so one factor may be used by concurrent calls.
class SKETCHCORE_API Int8Factor : public QuantizedFactor {
 public:
  /// Stores and packs the rows × cols matrix at `q` (element (i, j) at q[i·row_stride + j·col_stride],
  /// strides in elements, any sign) with the column scales `scale` (contiguous, cols values).
  /// @throws shape_error          for negative extents or more than 65,536 rows
  /// @throws std::invalid_argument for a q value of −128 (the range is symmetric) or a scale
  ///                              that is negative or not finite; messages name the argument,
  ///                              the expected and the actual value
  Int8Factor(const std::int8_t* q, std::int64_t rows, std::int64_t cols, std::int64_t row_stride,
             std::int64_t col_stride, const float* scale);

  /// Writes the int8 values back, row-major, into `q` (rows·cols values); nothing when moved from.
  void unpack(std::int8_t* q) const noexcept;

  /// The CPU's packed layout, for its kernels (cpu/int8_gemm.hpp).
  struct Packed;
  /// The packing (only for a valid factor).
  const Packed& packed() const;
};

/// Checks the operands of int8_sketched_matmul and returns the shape of its result,
/// `x.shape[:-1] + (U.cols(),)`.
/// @throws shape_error  for x without dimensions or extents that do not chain
///                      (x.shape[-1] = S.rows(), S.cols() = U.rows())
/// @throws dtype_error  for an x that is not float32
/// @throws device_error for an x on a CUDA device when this build has no CUDA backend
SKETCHCORE_API std::vector<std::int64_t> int8_sketched_matmul_output_shape(const TensorView& x, const Int8Factor& S,
                                                                           const Int8Factor& U);

/// Computes, for every row x_i of x (float32, any strides):
///   a = q8(x_i) (row scale s_x = max|x_i|/127, q = clip(round_half_even(x_i · (127/max|x_i|)), ±127),
///   in float32),
///   z = σ(s_x · (a·S_q) ⊙ S.scale)        (int32 sums, then float32; σ = inner_activation)
///   b = q8(z), y_i = act(epilogue.scale · s_z · (b·U_q) ⊙ U.scale + bias)
/// An all-zero row quantizes to zeros; a row with a non-finite value gives a NaN row.
/// `out` (float32, shape int8_sketched_matmul_output_shape) must have unit column stride and
/// leading dimensions that collapse into one row stride, no overlap with x or the bias.
/// Dropout is not supported (epilogue.dropout_p must be 0). On the CPU, runs on sketchcore's
/// workers with the kernels of int8_gemm_isa(). On a CUDA device (x, out and the bias there),
/// runs on the calling thread's stream: the factors are copied to the device on their first
/// call there (kept until the factor dies; that first call synchronises and cannot be captured
/// in a CUDA graph), the products are cuBLASLt int8 GEMMs with int32 sums, temporaries come from
/// the device pool. The CUDA path has not yet run on a GPU: it is the gated path
/// GatedPath::cuda_int8_factors (gated_paths.hpp). Thread safety: concurrent calls are safe
/// when their outputs do not overlap.
/// @throws shape_error  as int8_sketched_matmul_output_shape, and for a wrong `out` or `epilogue.bias`
/// @throws dtype_error  as int8_sketched_matmul_output_shape, and for a wrong `out` or `epilogue.bias`
/// @throws device_error as int8_sketched_matmul_output_shape, and for a wrong `out` or `epilogue.bias`
/// @throws std::invalid_argument for a dropout probability other than 0 or a non-finite scale
/// @throws unverified_path_error for an x on a CUDA device while GatedPath::cuda_int8_factors is closed
SKETCHCORE_API void int8_sketched_matmul(const TensorView& x, const Int8Factor& S, const Int8Factor& U,
                                         const TensorView& out, const Epilogue& epilogue = {});

/// Checks the operands of int8_matmul and returns the shape of its result,
/// `x.shape[:-1] + (W.cols(),)`.
/// @throws shape_error  for x without dimensions or x.shape[-1] ≠ W.rows()
/// @throws dtype_error  for an x that is not float32
/// @throws device_error for an x on a CUDA device when this build has no CUDA backend
/// @throws std::invalid_argument for a moved-from W
SKETCHCORE_API std::vector<std::int64_t> int8_matmul_output_shape(const TensorView& x, const Int8Factor& W);

/// The full-rank int8 product (one GEMM on a dense int8 weight): for every row x_i of x
/// (float32, any strides),
///   a = q8(x_i) (row scale s_x = max|x_i|/127, q = clip(round_half_even(x_i · (127/max|x_i|)), ±127),
///   in float32),
///   y_i = act(epilogue.scale · s_x · (a·W_q) ⊙ W.scale + bias)     (int32 sums, then float32)
/// with W (d_in × d_out) an Int8Factor, its scales one per output column. The epilogue's scale
/// is folded into the row scales. An all-zero row quantizes to zeros; a row with a non-finite
/// value gives a NaN row. `out` (float32, shape int8_matmul_output_shape) must have unit column
/// stride and leading dimensions that collapse into one row stride, no overlap with x or the bias.
/// Dropout is not supported (epilogue.dropout_p must be 0), nor an inner activation (there is
/// no inner product). On the CPU, runs on sketchcore's workers with the kernels of
/// int8_gemm_isa(), the same kernels as int8_sketched_matmul. On a CUDA device (x, out and the
/// bias there), runs on the calling thread's stream as one cuBLASLt int8 GEMM with int32 sums,
/// W copied to the device on its first call there (as for int8_sketched_matmul); that path has
/// not yet run on a GPU: it is the gated path GatedPath::cuda_int8_factors (gated_paths.hpp).
/// Thread safety: concurrent calls are safe when their outputs do not overlap.
/// @throws shape_error  as int8_matmul_output_shape, and for a wrong `out` or `epilogue.bias`
/// @throws dtype_error  as int8_matmul_output_shape, and for a wrong `out` or `epilogue.bias`
/// @throws device_error as int8_matmul_output_shape, and for a wrong `out` or `epilogue.bias`
/// @throws std::invalid_argument as int8_matmul_output_shape, for a dropout probability other
///                              than 0, a non-finite scale or an inner_activation other than none
/// @throws unverified_path_error for an x on a CUDA device while GatedPath::cuda_int8_factors is closed
SKETCHCORE_API void int8_matmul(const TensorView& x, const Int8Factor& W, const TensorView& out,
                                const Epilogue& epilogue = {});

/// The int8 kernel families of the CPU, in order of preference: AMX-INT8 (TDPBUSD on 16-row
/// tiles, the same int32 sums as AVX-512 VNNI; needs the tile state granted by Linux, asked once
/// per process; calls of fewer than 8 rows run the AVX-512 VNNI kernel), AVX-512 VNNI (VPDPBUSD on
/// 512-bit vectors), AVX-VNNI (the same on 256-bit vectors), AVX2 (VPMADDUBSW on signed
/// operands made safe from saturation) and portable C++.
/// @return the name of the family the int8 calls of this process run: "amx", "avx512_vnni",
///         "avx_vnni", "avx2" or "portable" (the best this CPU has, capped by the environment
///         variable SKETCHCORE_INT8_ISA with one of those names, read once)
/// @throws std::invalid_argument when SKETCHCORE_INT8_ISA is set to another name (so do the int8
///         products: a misspelt cap is refused, not ignored)
SKETCHCORE_API std::string int8_gemm_isa();

/// Makes `name` (as int8_gemm_isa returns) the family of the int8 calls that follow, in every
/// thread; meant for tests and benchmarks that compare the families on one machine.
/// @throws std::invalid_argument for an unknown name or a family this CPU (or build) cannot run
SKETCHCORE_API void set_int8_gemm_isa(const std::string& name);

/// Whether this CPU can run the family `name` and it was compiled in.
/// @throws std::invalid_argument for an unknown name
SKETCHCORE_API bool int8_gemm_isa_supported(const std::string& name);

/// Times `iterations` rounds of 4 TDPBUSD on tiles ("amx"), or of 24 (AVX-512) or 12 (AVX-VNNI) VPDPBUSD on
/// independent accumulators in registers (asm: no loads, nothing the compiler can fold) on the calling thread and
/// returns int8 multiply-adds per second of wall-clock time (one TDPBUSD = 16·16·64 of them, one VPDPBUSD on
/// 512-bit vectors 64, on 256-bit vectors 32): the single-thread peak of the family `name` that the GEMM is
/// measured against (bench/int8_gemm.py). Returns 0 for "avx2" and "portable", which have no
/// dot-product instruction.
/// @throws std::invalid_argument as set_int8_gemm_isa, and for `iterations` < 1
SKETCHCORE_API double int8_peak_macs_per_second(const std::string& name, std::int64_t iterations);

/// Benchmark hook, not part of the stable API: the CPU int8 GEMM alone, as one product of
/// int8_sketched_matmul runs it. Quantizes the `rows` × factor.rows() row-major float32 rows `x`
/// once (untimed) with the active family, then runs the GEMM out = deq(xq · factor) (int32 sums,
/// dequantized to float32, no bias or activation; `out` rows × factor.cols(), row-major) `repeats`
/// times on sketchcore's workers.
/// @return the wall-clock seconds of each of the `repeats` GEMMs
/// @throws std::invalid_argument for a moved-from factor, rows < 0 or repeats < 1
SKETCHCORE_API std::vector<double> int8_gemm_seconds_for_bench(const float* x, std::int64_t rows,
                                                               const Int8Factor& factor, float* out,
                                                               std::int64_t repeats);

}  // namespace sketchcore
