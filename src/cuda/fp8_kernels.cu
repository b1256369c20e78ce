// The fp8 (e4m3) format's row kernels (fp8_kernels.cuh): its Codec for the kernels written once in
// quantized_rows.cuh. UNVERIFIED on a GPU (see the header).
#include "fp8_kernels.cuh"

#include <cuda_fp8.h>

#include "quantized_rows.cuh"

namespace sketchcore::cuda {

namespace {

/// e4m3 codes, float32 sums (z overwrites them in place).
struct Fp8Codec {
  using Code = std::uint8_t;
  using Sum = float;
  static constexpr float kMax = 448.0f;  // fp8_matmul.hpp's kE4m3Max
  static constexpr const char* kQuantizeName = "quantize_rows_kernel (fp8)";
  static constexpr const char* kRequantizeName = "requantize_rows_kernel (fp8)";
  static constexpr const char* kDequantizeName = "dequantize_rows_kernel (fp8)";
  /// The e4m3 code of v · inverse: round to nearest even, saturating to ±448 (the host's float_to_e4m3).
  __device__ static Code encode(float v, float inverse) {
    return static_cast<Code>(__nv_cvt_float_to_fp8(v * inverse, __NV_SATFINITE, __NV_E4M3));
  }
  __device__ static float value(Sum sum) { return sum; }
  __device__ static Sum store(float z) { return z; }
  __device__ static float load(Sum slot) { return slot; }
};

}  // namespace

void quantize_rows_fp8(const float* x, const RowLayout& layout, std::int64_t rows, std::int64_t cols,
                       std::uint8_t* dst, std::int64_t ld, float* scale, cudaStream_t stream) {
  quantized_rows::quantize<Fp8Codec>(x, layout, rows, cols, dst, ld, scale, stream, 1.0f);
}

void requantize_rows_fp8(float* acc, std::int64_t ld_acc, const float* row_scale, const float* col_scale,
                         std::int64_t rows, std::int64_t cols, Activation sigma, float scale_factor, std::uint8_t* dst,
                         std::int64_t ld_dst, float* dst_scale, cudaStream_t stream) {
  quantized_rows::requantize<Fp8Codec>(acc, ld_acc, row_scale, col_scale, rows, cols, sigma, scale_factor, dst,
                                       ld_dst, dst_scale, stream);
}

void dequantize_rows_fp8(const float* acc, std::int64_t ld_acc, const float* row_scale, const float* col_scale,
                         std::int64_t rows, std::int64_t cols, const float* bias, std::int64_t bias_stride,
                         Activation act, float* out, std::int64_t ld_out, cudaStream_t stream) {
  quantized_rows::dequantize<Fp8Codec>(acc, ld_acc, row_scale, col_scale, rows, cols, bias, bias_stride, act, out,
                                       ld_out, stream);
}

}  // namespace sketchcore::cuda
