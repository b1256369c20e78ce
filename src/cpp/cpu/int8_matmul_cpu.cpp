// The int8 sketched GEMM on the CPU (cpu/cpu_ops.hpp): x's rows quantized per row, the first
// int8 product dequantized into the float32 intermediate with σ applied per tile, its rows
// requantized, the second product dequantized with bias and activation straight into `out`.
// The intermediate (rows × rank floats) and the quantized rows are the only temporaries (pooled).
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

}  // namespace

void cpu_int8_sketched_matmul(const Int8MatmulProblem& p) {
  if (p.rows == 0 || p.d_out == 0) return;
  auto* out = static_cast<float*>(p.out.data());
  const Int8Isa isa = active_int8_isa();
  const bool offset = int8_isa_offsets_activations(isa);
  const Int8Factor::Packed& S = p.S.packed();
  const Int8Factor::Packed& U = p.U.packed();

  std::vector<float> bias_copy;
  const float* bias = nullptr;
  if (p.epilogue.bias) {
    if (p.epilogue.bias->stride(0) == 1 || p.d_out == 1) {
      bias = static_cast<const float*>(p.epilogue.bias->data());
    } else {
      bias_copy = contiguous_bias(*p.epilogue.bias);
      bias = bias_copy.data();
    }
  }

  // x → int8 rows (stride 4·groups of S).
  const RowMatrix xm = as_row_matrix(p.x);
  std::vector<std::int64_t> offsets;
  if (!xm.row_stride && p.rows > 1) offsets = row_offsets(p.x, p.rows);
  const std::int64_t x_stride = int8_rows_stride(S.groups);
  Scratch<std::uint8_t> xq(p.rows * x_stride);  // pooled and uninitialised: every byte read is written
  Scratch<float> x_scale(p.rows);
  quantize_rows_int8(static_cast<const float*>(p.x.data()), offsets.empty() ? nullptr : offsets.data(),
                     xm.row_stride.value_or(0), xm.col_stride, p.rows, p.d_in, isa, xq.data(), x_stride, x_scale.data());

  // Z = σ(deq(xq · S)), rows × rank.
  Scratch<float> z(p.rows * p.rank);
  int8_gemm({xq.data(), x_stride, x_scale.data(), offset}, p.rows, S, z.data(), p.rank, nullptr,
            p.epilogue.inner_activation, isa);

  // Z → int8 rows, the epilogue's scale folded into the row scales; out = act(deq(zq · U) + bias).
  const std::int64_t z_stride = int8_rows_stride(U.groups);
  Scratch<std::uint8_t> zq(p.rows * z_stride);
  Scratch<float> z_scale(p.rows);
  quantize_rows_int8(z.data(), nullptr, p.rank, 1, p.rows, p.rank, isa, zq.data(), z_stride, z_scale.data(),
                     static_cast<float>(p.epilogue.scale));
  int8_gemm({zq.data(), z_stride, z_scale.data(), offset}, p.rows, U, out, p.out_row_stride, bias,
            p.epilogue.activation, isa);
}

}  // namespace sketchcore::detail
