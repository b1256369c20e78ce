/// @file fp8_matmul.hpp
/// @brief The fp8 (e4m3) sketched GEMM on CUDA devices of compute capability 8.9 or newer:
/// y = act(deq(f8(σ(deq(f8(x)·S_f)))·U_f) + bias), with e4m3 factors uploaded once and
/// activations quantized per row to e4m3 on the fly (float32 accumulation in cuBLASLt).
///
/// There is no CPU kernel: on the CPU the factors exist (they are built and checked on the
/// host) but the product is refused. The CUDA path has not yet run on a GPU: it is the gated
/// path GatedPath::cuda_fp8_factors (gated_paths.hpp).
#pragma once

#include <cstdint>
#include <vector>

#include "sketchcore/epilogue.hpp"
#include "sketchcore/export.hpp"
#include "sketchcore/quantized.hpp"
#include "sketchcore/tensor.hpp"

namespace sketchcore {

/// The largest finite e4m3 value (code 0x7E): 1.75 · 2^8.
inline constexpr float kE4m3Max = 448.0f;

/// The e4m3 ("fn": no infinities, one NaN pattern per sign) code nearest to `value`: sign bit,
/// 4 exponent bits (bias 7), 3 mantissa bits, subnormals below 2^-6. Rounds to nearest, ties to
/// the even code; saturates: every value beyond ±448, infinities included, gives ±448; a NaN
/// gives 0x7F. Exactly what cuda_fp8.h's __nv_cvt_float_to_fp8(value, __NV_SATFINITE, __NV_E4M3)
/// computes on the device.
SKETCHCORE_API std::uint8_t float_to_e4m3(float value) noexcept;

/// The value of the e4m3 code `code` (exact in float32); NaN for 0x7F and 0xFF.
SKETCHCORE_API float e4m3_to_float(std::uint8_t code) noexcept;

/// A k × n matrix of e4m3 codes c[i][j] with one float32 scale per column: its value is
/// e4m3_to_float(c[i][j]) · scale[j]. The QuantizedFactor of format fp8_e4m3 (quantized.hpp):
/// stored at construction in the layout cuBLASLt's fp8 GEMM reads (columns contiguous, extents
/// padded with zeros to multiples of 16), copied to a device on its first call there and kept
/// until the factor dies; immutable, so one factor may be used by concurrent calls.
class SKETCHCORE_API Fp8Factor : public QuantizedFactor {
 public:
  /// Copies the rows × cols codes at `codes` (element (i, j) at codes[i·row_stride +
  /// j·col_stride], strides in elements, any sign) with the column scales `scale` (contiguous,
  /// cols values).
  /// @throws shape_error          for negative extents
  /// @throws std::invalid_argument for a NaN code (0x7F or 0xFF) or a scale that is negative or
  ///                              not finite; messages name the argument, the expected and the
  ///                              actual value
  Fp8Factor(const std::uint8_t* codes, std::int64_t rows, std::int64_t cols, std::int64_t row_stride,
            std::int64_t col_stride, const float* scale)
      : QuantizedFactor(QuantFormat::fp8_e4m3, codes, rows, cols, row_stride, col_stride, scale) {}

  /// Writes the codes back, row-major, into `codes` (rows·cols values); nothing when moved from.
  void unpack(std::uint8_t* codes) const noexcept { unpack_codes(codes); }
};

/// Checks the operands of fp8_sketched_matmul and returns the shape of its result,
/// `x.shape[:-1] + (U.cols(),)`.
/// @throws shape_error  for x without dimensions or extents that do not chain
///                      (x.shape[-1] = S.rows(), S.cols() = U.rows())
/// @throws dtype_error  for an x that is not float32
/// @throws device_error for an x that is not on a CUDA device (there is no CPU fp8 kernel), or on
///                      one when this build has no CUDA backend
SKETCHCORE_API std::vector<std::int64_t> fp8_sketched_matmul_output_shape(const TensorView& x, const Fp8Factor& S,
                                                                          const Fp8Factor& U);

/// Computes, for every row x_i of x (float32 on a CUDA device, any strides):
///   a = f8(x_i) (row scale s_x = max|x_i|/448, codes float_to_e4m3(x_i · (448/max|x_i|)) in float32),
///   z = σ(s_x · (a·S_f) ⊙ S.scale)        (float32 sums of the e4m3 products; σ = inner_activation)
///   b = f8(z), y_i = act(epilogue.scale · s_z · (b·U_f) ⊙ U.scale + bias)
/// An all-zero row quantizes to zeros; a row with a non-finite value gives a NaN row. The
/// products are cuBLASLt fp8 GEMMs (e4m3 operands, "TN", CUBLAS_COMPUTE_32F, float32 output);
/// the row and column scales are applied by own kernels (cuBLASLt's scale pointers are per
/// tensor). Runs on the calling thread's stream; the factors' first call on a device synchronises
/// (upload) and cannot be captured in a CUDA graph; temporaries come from the device pool.
/// `out` (float32, shape fp8_sketched_matmul_output_shape) must have unit column stride and
/// leading dimensions that collapse into one row stride, no overlap with x or the bias. Dropout
/// is not supported. Thread safety: concurrent calls are safe when their outputs do not overlap.
/// @throws shape_error  as fp8_sketched_matmul_output_shape, and for a wrong `out` or `epilogue.bias`
/// @throws dtype_error  as fp8_sketched_matmul_output_shape, and for a wrong `out` or `epilogue.bias`
/// @throws device_error as fp8_sketched_matmul_output_shape, for a wrong `out` or `epilogue.bias`,
///                      and for a device of compute capability below 8.9 (checked after the gate)
/// @throws std::invalid_argument for a dropout probability other than 0 or a non-finite scale
/// @throws unverified_path_error while GatedPath::cuda_fp8_factors is closed
SKETCHCORE_API void fp8_sketched_matmul(const TensorView& x, const Fp8Factor& S, const Fp8Factor& U,
                                        const TensorView& out, const Epilogue& epilogue = {});

}  // namespace sketchcore
