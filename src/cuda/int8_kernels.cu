// The int8 format's row kernels (int8_kernels.cuh): its Codec for the kernels written once in
// quantized_rows.cuh. UNVERIFIED on a GPU (see the header).
#include "int8_kernels.cuh"

#include "quantized_rows.cuh"

namespace sketchcore::cuda {

namespace {

/// int8 codes, int32 sums; z is kept in a sum's slot as its float32 bits.
struct Int8Codec {
  using Code = std::int8_t;
  using Sum = std::int32_t;
  static constexpr float kMax = 127.0f;
  static constexpr const char* kQuantizeName = "quantize_rows_kernel";
  static constexpr const char* kRequantizeName = "requantize_rows_kernel";
  static constexpr const char* kDequantizeName = "dequantize_rows_kernel";
  /// The CPU's quantization of one value of a row with a finite, non-zero maximum.
  __device__ static Code encode(float v, float inverse) {
    return static_cast<Code>(__float2int_rn(fminf(127.0f, fmaxf(-127.0f, v * inverse))));
  }
  __device__ static float value(Sum sum) { return static_cast<float>(sum); }
  __device__ static Sum store(float z) { return __float_as_int(z); }
  __device__ static float load(Sum slot) { return __int_as_float(slot); }
};

}  // namespace

void quantize_rows_int8(const float* x, const RowLayout& layout, std::int64_t rows, std::int64_t cols,
                        std::int8_t* dst, std::int64_t ld, float* scale, cudaStream_t stream, float scale_factor) {
  quantized_rows::quantize<Int8Codec>(x, layout, rows, cols, dst, ld, scale, stream, scale_factor);
}

void requantize_rows_int8(std::int32_t* acc, std::int64_t ld_acc, const float* row_scale, const float* col_scale,
                          std::int64_t rows, std::int64_t cols, Activation sigma, float scale_factor,
                          std::int8_t* dst, std::int64_t ld_dst, float* dst_scale, cudaStream_t stream) {
  quantized_rows::requantize<Int8Codec>(acc, ld_acc, row_scale, col_scale, rows, cols, sigma, scale_factor, dst,
                                        ld_dst, dst_scale, stream);
}

void dequantize_rows_int8(const std::int32_t* acc, std::int64_t ld_acc, const float* row_scale,
                          const float* col_scale, std::int64_t rows, std::int64_t cols, const float* bias,
                          std::int64_t bias_stride, Activation act, float* out, std::int64_t ld_out,
                          cudaStream_t stream) {
  quantized_rows::dequantize<Int8Codec>(acc, ld_acc, row_scale, col_scale, rows, cols, bias, bias_stride, act, out,
                                        ld_out, stream);
}

}  // namespace sketchcore::cuda
