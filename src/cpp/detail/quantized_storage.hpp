// The storage of a QuantizedFactor (include/sketchcore/quantized.hpp), the copies backends make of
// it, and the validated problems the backends receive. Core code (no CUDA or CPU-kernel header).
//
// Stored layout, the one the CUDA backend uploads for cuBLASLt's int8 and fp8 GEMMs ("TN": the
// first operand transposed, the only fp8 layout cuBLASLt accepts): a k × n factor is stored column
// by column, column j's k codes contiguous at j·k_pad, zero-padded to k_pad rows and n_pad columns,
// both multiples of 16 (the extents and leading dimensions the tensor-core kernels need; code 0 is
// zero in both formats, so the padded inner products are the unpadded ones). The scales are padded
// with zeros to n_pad. Backends that read another layout keep it in `copies` (the CPU's int8 panels
// under kHostCopy, cpu/int8_gemm.hpp; a device copy per CUDA device index).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "sketchcore/epilogue.hpp"
#include "sketchcore/quantized.hpp"
#include "sketchcore/tensor.hpp"

namespace sketchcore::detail {

/// The multiple every stored extent is padded to.
constexpr std::int64_t kQuantizedAlignment = 16;

/// `extent` padded to kQuantizedAlignment, at least one multiple (an empty extent still gives
/// the GEMM a valid shape; its padding is zeros).
constexpr std::int64_t quantized_extent(std::int64_t extent) noexcept {
  const std::int64_t at_least_one = extent > 0 ? extent : 1;
  return (at_least_one + kQuantizedAlignment - 1) / kQuantizedAlignment * kQuantizedAlignment;
}

/// The key of a host backend's copy in DeviceCopies (CUDA copies use their device index, ≥ 0).
constexpr int kHostCopy = -1;

/// Copies of one object, one per key (a device index, or kHostCopy), made on first use and kept
/// until the owner dies (the deleter of each frees its memory). Thread-safe.
class DeviceCopies {
 public:
  /// The copy for `key`, made by `make()` (a std::shared_ptr<const void>) if there is none yet.
  template <class Make>
  std::shared_ptr<const void> get_or_make(int key, Make&& make) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& copy : copies_) {
      if (copy.first == key) return copy.second;
    }
    std::shared_ptr<const void> made = make();
    copies_.emplace_back(key, made);
    return made;
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<int, std::shared_ptr<const void>>> copies_;
};

}  // namespace sketchcore::detail

namespace sketchcore {

/// The stored factor (see the file's description).
struct QuantizedFactor::Storage {
  std::int64_t rows = 0, cols = 0;    ///< k and n
  std::int64_t k_pad = 0, n_pad = 0;  ///< padded to multiples of 16, at least 16
  std::vector<std::uint8_t> codes;    ///< n_pad · k_pad codes (bytes), column j at j · k_pad
  std::vector<float> scales;          ///< n_pad column scales, zeros past cols
  std::int64_t host_copy_bytes = 0;   ///< bytes of the host backends' copies (counted by nbytes)
  mutable detail::DeviceCopies copies;  ///< the backends' copies, made on first use (const factors too)
};

namespace detail {

/// A validated quantized_sketched_matmul problem: x (..., d_in) float32, S (d_in × rank) and U
/// (rank × d_out) factors of one format, `out` (..., d_out) float32 with unit column stride and
/// collapsing rows (row stride out_row_stride), no overlap; the bias (if any) float32 (d_out).
struct QuantizedMatmulProblem {
  const TensorView& x;
  const QuantizedFactor& S;
  const QuantizedFactor& U;
  const TensorView& out;
  const Epilogue& epilogue;
  std::int64_t rows, d_in, rank, d_out;
  std::int64_t out_row_stride;
};

/// A validated quantized_matmul problem: x (..., d_in) float32, W (d_in × d_out) a factor,
/// `out` (..., d_out) as above; the bias (if any) float32 (d_out); epilogue.inner_activation none.
struct QuantizedDenseProblem {
  const TensorView& x;
  const QuantizedFactor& W;
  const TensorView& out;
  const Epilogue& epilogue;
  std::int64_t rows, d_in, d_out;
  std::int64_t out_row_stride;
};

}  // namespace detail

}  // namespace sketchcore
