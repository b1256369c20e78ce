// The int8 GEMMs on the CPU (cpu/cpu_ops.hpp). int8_sketched_matmul: x's rows quantized per row,
// the first int8 product dequantized into the float32 intermediate with σ applied per tile, its
// rows requantized, the second product dequantized with bias and activation straight into `out`.
// The intermediate (rows × rank floats) and the quantized rows are the only temporaries (pooled).
// int8_matmul (full rank): x's rows quantized, one product with bias and activation into `out`.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "cpu/cpu_ops.hpp"
#include "cpu/int8_gemm.hpp"
#include "detail/layout.hpp"
#include "detail/scratch.hpp"

namespace sketchcore::detail {

namespace {

/// Element offsets of every row of x when its leading dimensions do not collapse.
std::vector<std::int64_t> row_offsets(const TensorView& x, std::int64_t rows) {
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(rows));
  const int lead = x.ndim() - 1;
  std::vector<std::int64_t> index(static_cast<std::size_t>(lead), 0);
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int64_t offset = 0;
    for (int d = 0; d < lead; ++d) offset += index[static_cast<std::size_t>(d)] * x.stride(d);
    offsets[static_cast<std::size_t>(r)] = offset;
    for (int d = lead - 1; d >= 0; --d) {  // next index, last dimension fastest
      if (++index[static_cast<std::size_t>(d)] < x.size(d)) break;
      index[static_cast<std::size_t>(d)] = 0;
    }
  }
  return offsets;
}

/// A contiguous copy of a strided bias (the kernels read it contiguously).
std::vector<float> contiguous_bias(const TensorView& bias) {
  std::vector<float> copy(static_cast<std::size_t>(bias.size(0)));
  const auto* data = static_cast<const float*>(bias.data());
  for (std::int64_t j = 0; j < bias.size(0); ++j) copy[static_cast<std::size_t>(j)] = data[j * bias.stride(0)];
  return copy;
}

/// The bias as the kernels read it: contiguous (its own data, or a copy kept in `copy`) or null.
const float* bias_for_kernels(const Epilogue& epilogue, std::int64_t d_out, std::vector<float>& copy) {
  if (!epilogue.bias) return nullptr;
  if (epilogue.bias->stride(0) == 1 || d_out == 1) return static_cast<const float*>(epilogue.bias->data());
  copy = contiguous_bias(*epilogue.bias);
  return copy.data();
}

/// x's rows quantized for the packed factor `b` (row stride 4·groups of b), with `scale_factor`
/// folded into the row scales.
struct QuantizedX {
  std::int64_t stride;
  Scratch<std::uint8_t> q;  // pooled and uninitialised: every byte read is written
  Scratch<float> scale;

  QuantizedX(const TensorView& x, std::int64_t rows, std::int64_t d_in, const Int8Factor::Packed& b, Int8Isa isa,
             float scale_factor)
      : stride(int8_rows_stride(b.groups)), q(rows * stride), scale(rows) {
    const RowMatrix xm = as_row_matrix(x);
    std::vector<std::int64_t> offsets;
    if (!xm.row_stride && rows > 1) offsets = row_offsets(x, rows);
    quantize_rows_int8(static_cast<const float*>(x.data()), offsets.empty() ? nullptr : offsets.data(),
                       xm.row_stride.value_or(0), xm.col_stride, rows, d_in, isa, q.data(), stride, scale.data(),
                       scale_factor);
  }
  Int8Rows rows_for(Int8Isa isa) const { return {q.data(), stride, scale.data(), int8_isa_offsets_activations(isa)}; }
};

}  // namespace

void cpu_int8_sketched_matmul(const QuantizedMatmulProblem& p) {
  if (p.rows == 0 || p.d_out == 0) return;
  auto* out = static_cast<float*>(p.out.data());
  const Int8Isa isa = active_int8_isa();
  const bool offset = int8_isa_offsets_activations(isa);
  const Int8Factor::Packed& S = int8_packing(p.S);
  const Int8Factor::Packed& U = int8_packing(p.U);
  std::vector<float> bias_copy;
  const float* bias = bias_for_kernels(p.epilogue, p.d_out, bias_copy);

  // x → int8 rows (stride 4·groups of S).
  const QuantizedX xq(p.x, p.rows, p.d_in, S, isa, 1.0f);

  // Z = σ(deq(xq · S)), rows × rank.
  Scratch<float> z(p.rows * p.rank);
  int8_gemm(xq.rows_for(isa), p.rows, S, z.data(), p.rank, nullptr, p.epilogue.inner_activation, isa);

  // Z → int8 rows, the epilogue's scale folded into the row scales; out = act(deq(zq · U) + bias).
  const std::int64_t z_stride = int8_rows_stride(U.groups);
  Scratch<std::uint8_t> zq(p.rows * z_stride);
  Scratch<float> z_scale(p.rows);
  quantize_rows_int8(z.data(), nullptr, p.rank, 1, p.rows, p.rank, isa, zq.data(), z_stride, z_scale.data(),
                     static_cast<float>(p.epilogue.scale));
  int8_gemm({zq.data(), z_stride, z_scale.data(), offset}, p.rows, U, out, p.out_row_stride, bias,
            p.epilogue.activation, isa);
}

void cpu_int8_matmul(const QuantizedDenseProblem& p) {
  if (p.rows == 0 || p.d_out == 0) return;
  const Int8Isa isa = active_int8_isa();
  const Int8Factor::Packed& W = int8_packing(p.W);
  std::vector<float> bias_copy;
  const float* bias = bias_for_kernels(p.epilogue, p.d_out, bias_copy);
  // x → int8 rows with the epilogue's scale folded in; out = act(deq(xq · W) + bias): one GEMM.
  const QuantizedX xq(p.x, p.rows, p.d_in, W, isa, static_cast<float>(p.epilogue.scale));
  int8_gemm(xq.rows_for(isa), p.rows, W, static_cast<float*>(p.out.data()), p.out_row_stride, bias,
            p.epilogue.activation, isa);
}

}  // namespace sketchcore::detail
