// The CUDA backend's own kernels: strided copies (packing and unpacking operands), the
// forward and backward epilogues (bias, activation, dropout with the CPU's Philox mask),
// and the column sums of the bias gradient. All run on the given stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>

#include "detail/activations.hpp"
#include "sketchcore/epilogue.hpp"
#include "sketchcore/tensor.hpp"

namespace sketchcore::cuda {

constexpr int kMaxDims = 8;

/// Shape and element strides of an N-d view (N ≤ kMaxDims), passed to kernels by value.
struct Strided {
  int ndim = 0;
  std::int64_t shape[kMaxDims] = {};
  std::int64_t stride[kMaxDims] = {};
};

/// The view's shape and strides (throws shape_error beyond kMaxDims dimensions).
Strided strided_of(const TensorView& view);

/// A compact row-major `shape` (used for scratch buffers).
Strided compact(std::initializer_list<std::int64_t> shape);

/// `view`'s shape with compact row-major strides (its packed copy).
Strided compact_like(const TensorView& view);

/// dst[i] = src[i] for every index of the common shape (`src.shape` is used).
template <class T>
void copy_strided(const T* src, const Strided& src_layout, T* dst, const Strided& dst_layout, cudaStream_t stream);

/// A (rows × cols) matrix view whose leading dimensions may not collapse: element (r, c) is
/// at offset(r) + c·col_stride, with offset(r) from the leading shape and strides.
struct RowLayout {
  int lead_ndim = 0;
  std::int64_t lead_shape[kMaxDims] = {};
  std::int64_t lead_stride[kMaxDims] = {};
  std::int64_t col_stride = 1;
};

/// The row layout of a view of shape (..., cols).
RowLayout row_layout_of(const TensorView& view);
/// A compact row-major rows × cols matrix with leading dimension ld.
RowLayout row_layout_compact(std::int64_t ld);

#if defined(__CUDACC__)
/// The element offset of row `row` of `layout`.
__device__ __forceinline__ std::int64_t row_offset(const RowLayout& layout, std::int64_t row) {
  // One leading dimension (every compact buffer): no 64-bit division. The division below is
  // emulated on the GPU, and once per element it made the epilogue pass 15x slower than its
  // memory traffic (H100, 2026-11-22).
  if (layout.lead_ndim == 1) return row * layout.lead_stride[0];
  std::int64_t offset = 0;
  for (int k = layout.lead_ndim - 1; k >= 0; --k) {
    const std::int64_t extent = layout.lead_shape[k];
    offset += (row % extent) * layout.lead_stride[k];
    row /= extent;
  }
  return offset;
}
#endif

/// What the epilogue kernels still have to apply (cuBLASLt may have done part): the core's
/// one resolved-epilogue type.
using detail::EpilogueArgs;

/// out(r, c) = dropout(act(src(r, c) + bias[c])) over rows × cols; src and out may be the
/// same memory with the same layout (in place).
template <class T>
void epilogue_forward(const T* src, const RowLayout& src_layout, T* out, const RowLayout& out_layout,
                      std::int64_t rows, std::int64_t cols, const EpilogueArgs<T>& epilogue, cudaStream_t stream);

/// g(r, c) = dy(r, c) · keep(r, c)/(1 − p) · act′(h(r, c) + bias[c]) into compact g
/// (rows × cols, ld cols); `h` (compact, ld cols) is read only when the activation needs
/// it and may be `g` itself.
template <class T>
void epilogue_backward(const T* dy, const RowLayout& dy_layout, const T* h, T* g, std::int64_t rows,
                       std::int64_t cols, const EpilogueArgs<T>& epilogue, cudaStream_t stream);

/// How many row slabs column_sums splits `rows` into: `partial` must hold
/// column_sum_slabs(rows) × cols elements of the accumulation type.
std::int64_t column_sum_slabs(std::int64_t rows);

/// out[c·out_stride] = Σ_r g(r, c) for compact g (rows × cols), accumulated in float (double
/// for double) through `partial`, in a fixed order (bit-reproducible).
template <class T>
void column_sums(const T* g, std::int64_t rows, std::int64_t cols, void* partial, T* out, std::int64_t out_stride,
                 cudaStream_t stream);

/// Fills `count` elements of compact `dst` with zero.
template <class T>
void fill_zero(T* dst, std::int64_t count, cudaStream_t stream);

}  // namespace sketchcore::cuda
