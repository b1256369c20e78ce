// The storage of an Fp8Factor, in the layout the device's fp8 GEMM reads, and the validated
// problem the backends receive. Core code (no CUDA header).
//
// Layout for cuBLASLt's fp8 GEMM (e4m3 operands, "TN": the first operand transposed, the only
// fp8 layout cuBLASLt accepts): a k × n factor is stored column by column, column j's k codes
// contiguous at j·k_pad, zero-padded to k_pad rows and n_pad columns, both multiples of 16 (the
// extents and leading dimensions cuBLASLt's fp8 kernels need; code 0 is +0, so the padded inner
// products are the unpadded ones). The scales are padded with zeros to n_pad.
#pragma once

#include <cstdint>
#include <vector>

#include "detail/int8_device.hpp"
#include "sketchcore/fp8_matmul.hpp"

namespace sketchcore {

/// The stored factor (see the file's description).
struct Fp8Factor::Storage {
  std::int64_t rows = 0, cols = 0;    ///< k and n
  std::int64_t k_pad = 0, n_pad = 0;  ///< padded to multiples of 16, at least 16
  std::vector<std::uint8_t> codes;    ///< n_pad · k_pad e4m3 codes, column j at j · k_pad
  std::vector<float> scales;          ///< n_pad column scales, zeros past cols
  mutable detail::DeviceCopies device_copies;  ///< the copies on devices, made on first use (const factors too)
};

namespace detail {

/// A validated fp8_sketched_matmul problem: x (..., d_in) float32 on a CUDA device, S (d_in ×
/// rank) and U (rank × d_out) e4m3 factors, `out` (..., d_out) float32 with unit column stride
/// and collapsing rows (row stride out_row_stride), no overlap; the bias (if any) float32 (d_out).
struct Fp8MatmulProblem {
  const TensorView& x;
  const Fp8Factor& S;
  const Fp8Factor& U;
  const TensorView& out;
  const Epilogue& epilogue;
  std::int64_t rows, d_in, rank, d_out;
  std::int64_t out_row_stride;
};

}  // namespace detail

}  // namespace sketchcore
