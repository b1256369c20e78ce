/// @file sketch.hpp
/// @brief Random sketching operators: counter-based, identical on every thread count and
/// device, applied without being materialized.
///
/// An operator S of shape (rows m, cols n) is the tuple (kind, m, n, seed, nnz, scaled):
/// every entry is a pure function of it and (i, j), drawn from Philox4x32-10 with
/// key = (seed mod 2^32, seed / 2^32) and counter (c0, c1, c2, stream):
///
/// | kind        | entries (scaled; unscaled drops the factor)        | counter → entry                     |
/// |-------------|-----------------------------------------------------|-------------------------------------|
/// | gaussian    | N(0, 1/m)                                           | (i/4, j, 0, "GAUS"), Box–Muller on words (0,1) and (2,3), lane i%4 |
/// | rademacher  | ±1/√m                                               | (i/4, j, 0, "RADE"), sign = top bit of word i%4 |
/// | uniform     | U(−√(3/m), √(3/m)) (variance 1/m)                   | (i/4, j, 0, "UNIF"), (word + ½)/2^32 |
/// | sparse_sign | exactly nnz entries ±1/√nnz per column, distinct rows | column j's word stream (t/4, j, 0, "SPAR"), lane t%4: Floyd's sample of nnz rows with Lemire's unbiased integers, then one sign per row in ascending row order |
/// | countsketch | sparse_sign with nnz = 1 (±1)                       | as sparse_sign                      |
/// | srht        | √(n'/m) · R · H · D restricted to the first n columns; n' = n rounded up to a power of two, H the orthonormal Walsh–Hadamard matrix, D = diag(±1) from (j/4, 0, 0, "SRHS"), R = m distinct rows of n' in ascending order, Floyd's sample from the stream (t/4, 0, 0, "SRHR") |
///
/// Box–Muller uses sketchcore's own log and sin/cos (built from correctly rounded IEEE
/// operations only, never fused), so Gaussian entries, like all others, are the same bits
/// on every CPU, compiler and CUDA device.
///
/// With `scaled`, E[SᵀS] = I. Any block of S generated on its own equals the same block of
/// the whole, whatever the thread count.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "sketchcore/export.hpp"
#include "sketchcore/tensor.hpp"

namespace sketchcore {

/// Distribution of a sketching operator.
enum class SketchKind : unsigned char { gaussian, rademacher, uniform, sparse_sign, countsketch, srht };

/// Name of a kind ("gaussian", ...).
SKETCHCORE_API const char* sketch_kind_name(SketchKind kind) noexcept;

/// Parses a kind name; throws std::invalid_argument naming the accepted names.
SKETCHCORE_API SketchKind parse_sketch_kind(std::string_view name);

/// A sketching operator of shape (rows, cols). See the table above for its entries.
struct SketchOperator {
  SketchKind kind = SketchKind::gaussian;  ///< distribution
  std::int64_t rows = 0;                   ///< m ≥ 1 (< 2^31)
  std::int64_t cols = 0;                   ///< n ≥ 1 (< 2^31)
  std::uint64_t seed = 0;                  ///< Philox key
  std::int64_t nnz = 1;                    ///< nonzeros per column (sparse_sign), 1 ≤ nnz ≤ rows
  bool scaled = true;                      ///< scale so that E[SᵀS] = I
};

/// Checks `op` (extents, nnz); throws std::invalid_argument naming the field.
SKETCHCORE_API void validate_sketch(const SketchOperator& op);

/// Writes the block S[row0 : row0 + out.rows, col0 : col0 + out.cols] into the 2-D `out`
/// (float32 or float64, any strides, CPU).
/// @throws shape_error if the block leaves S; dtype_error, device_error for `out`
SKETCHCORE_API void sketch_to_dense(const SketchOperator& op, const TensorView& out, std::int64_t row0 = 0,
                                    std::int64_t col0 = 0);

/// Side of an application.
enum class Side : unsigned char {
  left,   ///< out = S · A, A of shape (..., n, p), out (..., m, p)
  right,  ///< out = A · S, A of shape (..., p, m), out (..., p, n)
};

/// Shape of sketch_apply's result (with S replaced by Sᵀ when `transpose`).
/// @throws shape_error if `a` does not fit
SKETCHCORE_API std::vector<std::int64_t> sketch_apply_output_shape(const SketchOperator& op, const TensorView& a,
                                                                  Side side = Side::left, bool transpose = false);

/// out = S·A (left) or A·S (right), S replaced by Sᵀ when `transpose`, without forming S:
/// dense kinds are generated tile by tile into pooled memory and multiplied by BLAS;
/// sparse kinds are applied by scatter/gather in O(nnz · n · p); SRHT by a fast
/// Walsh–Hadamard transform in O(n' log n' · p). Leading dimensions of `a` are a batch.
/// @throws shape_error  as for sketched_matmul
/// @throws dtype_error  as for sketched_matmul
/// @throws device_error as for sketched_matmul
SKETCHCORE_API void sketch_apply(const SketchOperator& op, const TensorView& a, const TensorView& out,
                                 Side side = Side::left, bool transpose = false);

}  // namespace sketchcore
