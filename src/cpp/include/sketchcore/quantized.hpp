/// @file quantized.hpp
/// @brief Quantized factors of one format each (int8, fp8 e4m3: a table of formats), and the one
/// quantized sketched GEMM y = act(deq(q(σ(deq(q(x)·S_q)))·U_q) + bias) and full-rank GEMM
/// y = act(deq(q(x)·W_q) + bias) that every format runs through.
///
/// A QuantizedFactor holds host codes (one byte each) and one float32 scale per column; each
/// backend owns the layout its kernels read (the CPU packs int8 factors into its panels, the CUDA
/// backend keeps one device copy per device), made from those codes and kept by the factor.
/// Int8Factor (int8_matmul.hpp) and Fp8Factor (fp8_matmul.hpp) are the factors of one format.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "sketchcore/epilogue.hpp"
#include "sketchcore/export.hpp"
#include "sketchcore/tensor.hpp"

namespace sketchcore {

/// The code formats of quantized factors and of the activations quantized against them.
enum class QuantFormat {
  int8,      ///< signed bytes in [−127, 127] (symmetric), int32 sums
  fp8_e4m3,  ///< e4m3 "fn" codes (float_to_e4m3, fp8_matmul.hpp), float32 sums
};

/// One row of the table of formats: what a format's codes are and how it is named.
struct QuantFormatInfo {
  QuantFormat format;          ///< the format this row describes
  const char* name;            ///< "int8", "fp8_e4m3"
  const char* factor_type;     ///< the named factor type: "Int8Factor", "Fp8Factor"
  const char* codes_argument;  ///< the name of the codes argument of its constructor: "q", "codes"
  const char* code_rule;       ///< what a valid code is, as error messages say it
  int code_bytes;              ///< bytes per code (1 for both formats)
  bool signed_codes;           ///< codes are read as signed bytes (int8) rather than unsigned (fp8)
  /// The largest code value: a column (or row) of largest magnitude m gets the scale m / max_value,
  /// so that its largest value becomes ±max_value (127 for int8, 448 for e4m3).
  float max_value;
  std::int64_t max_rows;       ///< the largest inner dimension (int8: 65,536, the int32 sums stay exact)
  bool cpu_kernels;            ///< the CPU backend has kernels for it (int8 yes, fp8 no)
  const char* sketched_op;     ///< the name of its sketched GEMM: "int8_sketched_matmul", ...
  const char* dense_op;        ///< the name of its full-rank GEMM: "int8_matmul", "fp8_matmul"
  /// What x must be when the CPU has no kernels (the device_error's expectation); null for int8.
  const char* device_requirement;
};

/// The table row of `format`.
/// @throws std::invalid_argument for a value that is not an enumerator
SKETCHCORE_API const QuantFormatInfo& quant_format_info(QuantFormat format);

/// Every format, in the order of the enumeration.
SKETCHCORE_API std::vector<QuantFormat> quant_formats();

/// Whether `code` is a valid code of `format` (int8: not −128; e4m3: not one of the NaNs 0x7F, 0xFF).
SKETCHCORE_API bool quant_code_valid(QuantFormat format, std::uint8_t code) noexcept;

/// A k × n matrix of codes c[i][j] of one format with one float32 scale per column: its value is
/// decode(c[i][j]) · scale[j]. The codes are stored at construction column by column (column j's
/// k codes contiguous at j·k_pad, zero-padded to multiples of 16), the layout the CUDA backend
/// uploads; a backend that needs another layout (the CPU's int8 panels) makes it from these and
/// the factor keeps it. Immutable, so one factor may be used by concurrent calls.
class SKETCHCORE_API QuantizedFactor {
 public:
  /// Copies the rows × cols codes at `codes` (element (i, j) at codes[i·row_stride + j·col_stride],
  /// strides in elements, any sign; int8 codes are the bytes of the signed values) with the column
  /// scales `scale` (contiguous, cols values).
  /// @throws shape_error          for negative extents, more rows than the format allows or a
  ///                              size too large to store
  /// @throws std::invalid_argument for an invalid code (quant_code_valid), a null pointer, a
  ///                              scale that is negative or not finite, or an unknown format;
  ///                              messages name the factor type, the argument, the expected and
  ///                              the actual value
  QuantizedFactor(QuantFormat format, const std::uint8_t* codes, std::int64_t rows, std::int64_t cols,
                  std::int64_t row_stride, std::int64_t col_stride, const float* scale);
  virtual ~QuantizedFactor();                                  ///< frees the codes and every backend's copies
  QuantizedFactor(QuantizedFactor&&) noexcept;                 ///< takes over the storage
  QuantizedFactor& operator=(QuantizedFactor&&) noexcept;      ///< takes over the storage
  QuantizedFactor(const QuantizedFactor&) = delete;            ///< not copyable (it owns device copies)
  QuantizedFactor& operator=(const QuantizedFactor&) = delete; ///< not copyable

  /// The format of the codes (kept after a move, so that errors still name the factor type).
  QuantFormat format() const noexcept { return format_; }
  /// Whether the factor holds values: false only after it was moved from (every call given
  /// such a factor throws std::invalid_argument naming it; rows() and cols() are then 0).
  bool valid() const noexcept;
  /// Rows k (the inner dimension of the product it takes part in).
  std::int64_t rows() const noexcept;
  /// Columns n.
  std::int64_t cols() const noexcept;
  /// Bytes held on the host: the padded codes and column scales, and the layouts host backends
  /// made of them (the CPU's int8 panels and column sums).
  std::int64_t nbytes() const noexcept;
  /// Writes the codes back, row-major, into `codes` (rows·cols bytes); nothing when moved from.
  void unpack_codes(std::uint8_t* codes) const noexcept;
  /// The column scales (cols values; null when moved from).
  const float* scales() const noexcept;

  /// The stored codes and the backends' copies (detail/quantized_storage.hpp).
  struct Storage;
  /// The storage (only for a valid factor).
  const Storage& storage() const noexcept;

 private:
  QuantFormat format_;
  std::unique_ptr<Storage> storage_;
};

/// The factor of `format` made from the codes (arguments as QuantizedFactor's constructor), as its
/// named type: an Int8Factor (packed for the CPU at once) for int8, an Fp8Factor for fp8 — what
/// bindings that handle every format construct.
/// @throws as QuantizedFactor's constructor
SKETCHCORE_API std::unique_ptr<QuantizedFactor> make_quantized_factor(QuantFormat format, const std::uint8_t* codes,
                                                                      std::int64_t rows, std::int64_t cols,
                                                                      std::int64_t row_stride, std::int64_t col_stride,
                                                                      const float* scale);

/// Checks the operands of quantized_sketched_matmul and returns the shape of its result,
/// `x.shape[:-1] + (U.cols(),)`. Errors name the format's operation (int8_sketched_matmul, ...).
/// @throws std::invalid_argument for a moved-from factor, or a U of another format than S
/// @throws shape_error  for x without dimensions or extents that do not chain
///                      (x.shape[-1] = S.rows(), S.cols() = U.rows())
/// @throws dtype_error  for an x that is not float32
/// @throws device_error for an x on a device whose backend has no kernels of the format (the CPU
///                      for fp8), or on a CUDA device when this build has no CUDA backend
SKETCHCORE_API std::vector<std::int64_t> quantized_sketched_matmul_output_shape(const TensorView& x,
                                                                                const QuantizedFactor& S,
                                                                                const QuantizedFactor& U);

/// The sketched GEMM of the factors' format, for every row x_i of x (float32, any strides):
///   a = q(x_i) (row scale s_x = max|x_i|/M, codes of x_i · (M/max|x_i|), M the format's max_value),
///   z = σ(s_x · (a·S_q) ⊙ S.scale),  b = q(z),  y_i = act(epilogue.scale · s_z · (b·U_q) ⊙ U.scale + bias)
/// An all-zero row quantizes to zeros; a row with a non-finite value gives a NaN row. `out`
/// (float32, shape quantized_sketched_matmul_output_shape) must have unit column stride and leading
/// dimensions that collapse into one row stride, no overlap with x or the bias. Dropout is not
/// supported. int8_sketched_matmul and fp8_sketched_matmul describe each format's kernels.
/// @throws shape_error  as quantized_sketched_matmul_output_shape, and for a wrong `out` or `epilogue.bias`
/// @throws dtype_error  as quantized_sketched_matmul_output_shape, and for a wrong `out` or `epilogue.bias`
/// @throws device_error as quantized_sketched_matmul_output_shape, and for a wrong `out` or `epilogue.bias`
/// @throws std::invalid_argument as quantized_sketched_matmul_output_shape, and for a dropout
///                      probability other than 0 or a non-finite scale
/// @throws unverified_path_error for an x on a CUDA device while the format's gated path is closed
SKETCHCORE_API void quantized_sketched_matmul(const TensorView& x, const QuantizedFactor& S,
                                              const QuantizedFactor& U, const TensorView& out,
                                              const Epilogue& epilogue = {});

/// Checks the operands of quantized_matmul and returns the shape of its result, `x.shape[:-1] + (W.cols(),)`.
/// @throws as quantized_sketched_matmul_output_shape (W in the place of S)
SKETCHCORE_API std::vector<std::int64_t> quantized_matmul_output_shape(const TensorView& x, const QuantizedFactor& W);

/// The full-rank GEMM of W's format (one GEMM on a dense quantized weight): for every row x_i,
/// y_i = act(epilogue.scale · s_x · (q(x_i)·W_q) ⊙ W.scale + bias). Only int8 has kernels (CPU and
/// CUDA, see int8_matmul); an fp8 W is refused (device_error) by every backend.
/// @throws as quantized_sketched_matmul, and std::invalid_argument for an inner_activation other than none
SKETCHCORE_API void quantized_matmul(const TensorView& x, const QuantizedFactor& W, const TensorView& out,
                                     const Epilogue& epilogue = {});

}  // namespace sketchcore
