#include "kernels.cuh"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "cuda_common.cuh"
#include "launch.cuh"
#include "sketchcore/errors.hpp"

namespace sketchcore::cuda {

namespace {

template <class T>
__global__ void copy_strided_kernel(const T* src, Strided s, T* dst, Strided d, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += index_step()) {
    std::int64_t rest = i, from = 0, to = 0;
    for (int k = s.ndim - 1; k >= 0; --k) {
      const std::int64_t idx = rest % s.shape[k];
      rest /= s.shape[k];
      from += idx * s.stride[k];
      to += idx * d.stride[k];
    }
    dst[to] = src[from];
  }
}

// The epilogue kernels give each thread 4 consecutive columns of one row: the row's offset and
// the index arithmetic once per 4 elements, and one Philox block per 4 mask bits
// (detail::dropout_words, as on the CPU).
constexpr int kGroup = 4;

__device__ __forceinline__ detail::Philox4x32 mask_words(const detail::DropoutPlan& d, std::int64_t row,
                                                         std::int64_t c0) {
  return detail::dropout_words(d, static_cast<std::uint64_t>(row), static_cast<std::uint64_t>(c0 / kGroup));
}

template <class C>
__device__ __forceinline__ C apply_dropout(C v, const detail::DropoutPlan& d, std::uint32_t word, C keep_scale) {
  if (!d.enabled) return v;
  return detail::dropout_keeps(d, word) ? v * keep_scale : C(0);
}

/// Four consecutive elements, read or written as one access (16 bytes for float) when aligned.
template <class T>
struct alignas(kGroup * sizeof(T)) Quad {
  T v[kGroup];
};

/// Whether every 4-column group of a rows × cols view with this layout at `base` is one aligned
/// Quad: unit column stride, cols a multiple of 4, and the base and every row start aligned.
template <class T>
bool quad_aligned(const T* base, const RowLayout& layout, std::int64_t cols) {
  if (layout.col_stride != 1 || cols % kGroup != 0) return false;
  if (reinterpret_cast<std::uintptr_t>(base) % sizeof(Quad<T>) != 0) return false;
  for (int k = 0; k < layout.lead_ndim; ++k) {
    if (layout.lead_stride[k] % kGroup != 0) return false;
  }
  return true;
}

// kQuad: the source and destination rows are quad-aligned (quad_aligned), so each group is
// one load and one store. The compact case always is when d_out % 4 == 0; the scalar loop
// serves the rest (odd widths, strided outputs).
template <class T, class Act, bool kQuad>
__global__ void forward_kernel(const T* src, RowLayout src_layout, T* out, RowLayout out_layout, std::int64_t rows,
                               std::int64_t cols, EpilogueArgs<T> e, Act act) {
  using E = Element<T>;
  using C = typename E::Compute;
  const C keep_scale = static_cast<C>(e.dropout.keep_scale);
  const std::int64_t groups = (cols + kGroup - 1) / kGroup;
  for (std::int64_t i = first_index(); i < rows * groups; i += index_step()) {
    const std::int64_t r = i / groups, c0 = (i - r * groups) * kGroup;
    const T* src_row = src + row_offset(src_layout, r);
    T* out_row = out + row_offset(out_layout, r);
    const detail::Philox4x32 words = mask_words(e.dropout, r, c0);
    auto value = [&](T stored, std::int64_t c, int lane) {
      C v = E::load(stored);
      if (e.bias) v += E::load(e.bias[c * e.bias_stride]);
      return E::store(apply_dropout(act(v), e.dropout, words.v[lane], keep_scale));
    };
    if constexpr (kQuad) {
      const Quad<T> in = *reinterpret_cast<const Quad<T>*>(src_row + c0);
      Quad<T> result;
#pragma unroll
      for (int lane = 0; lane < kGroup; ++lane) result.v[lane] = value(in.v[lane], c0 + lane, lane);
      *reinterpret_cast<Quad<T>*>(out_row + c0) = result;
    } else {
#pragma unroll
      for (int lane = 0; lane < kGroup; ++lane) {
        const std::int64_t c = c0 + lane;
        if (c >= cols) break;
        out_row[c * out_layout.col_stride] = value(src_row[c * src_layout.col_stride], c, lane);
      }
    }
  }
}

// g (and h, when read) are compact rows × cols. kQuadDy: dy's rows are quad-aligned; kQuadG:
// g's and h's are (cols % 4 == 0 and aligned buffers). Separate, because a dy that cannot be
// read by quads (the expanded ones of `y.sum().backward()`, stride 0) still gets quad stores.
template <class T, class Grad, bool kQuadDy, bool kQuadG>
__global__ void backward_kernel(const T* dy, RowLayout dy_layout, const T* h, T* g, std::int64_t rows,
                                std::int64_t cols, EpilogueArgs<T> e, Grad grad, bool uses_h) {
  using E = Element<T>;
  using C = typename E::Compute;
  const C keep_scale = static_cast<C>(e.dropout.keep_scale);
  const std::int64_t groups = (cols + kGroup - 1) / kGroup;
  for (std::int64_t i = first_index(); i < rows * groups; i += index_step()) {
    const std::int64_t r = i / groups, c0 = (i - r * groups) * kGroup;
    const T* dy_row = dy + row_offset(dy_layout, r);
    const detail::Philox4x32 words = mask_words(e.dropout, r, c0);
    auto value = [&](T stored_dy, T stored_h, std::int64_t c, int lane) {
      C v = E::load(stored_dy);
      if (uses_h) {
        C pre = E::load(stored_h);
        if (e.bias) pre += E::load(e.bias[c * e.bias_stride]);
        v *= grad(pre);
      }
      return E::store(apply_dropout(v, e.dropout, words.v[lane], keep_scale));
    };
    if constexpr (kQuadG) {
      Quad<T> d{}, pre{}, result;
      if constexpr (kQuadDy) {
        d = *reinterpret_cast<const Quad<T>*>(dy_row + c0);
      } else {
#pragma unroll
        for (int lane = 0; lane < kGroup; ++lane) d.v[lane] = dy_row[(c0 + lane) * dy_layout.col_stride];
      }
      if (uses_h) pre = *reinterpret_cast<const Quad<T>*>(h + r * cols + c0);
#pragma unroll
      for (int lane = 0; lane < kGroup; ++lane) result.v[lane] = value(d.v[lane], pre.v[lane], c0 + lane, lane);
      *reinterpret_cast<Quad<T>*>(g + r * cols + c0) = result;
    } else {
#pragma unroll
      for (int lane = 0; lane < kGroup; ++lane) {
        const std::int64_t c = c0 + lane;
        if (c >= cols) break;
        g[r * cols + c] = value(dy_row[c * dy_layout.col_stride], uses_h ? h[r * cols + c] : T{}, c, lane);
      }
    }
  }
}

// Column sums in two deterministic passes (no atomics, so results are bit-reproducible):
// each block sums a 32-column tile over one slab of rows into partial[slab][col], then
// one thread per column adds the slabs in order.
constexpr int kSumCols = 32, kSumLanes = 8;

template <class T, class Acc>
__global__ void slab_sums_kernel(const T* g, std::int64_t rows, std::int64_t cols, std::int64_t slab_rows,
                                 Acc* partial) {
  __shared__ Acc tile[kSumLanes][kSumCols + 1];
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kSumCols + threadIdx.x;
  const std::int64_t begin = static_cast<std::int64_t>(blockIdx.y) * slab_rows;
  const std::int64_t end = begin + slab_rows < rows ? begin + slab_rows : rows;
  Acc sum = 0;
  if (c < cols) {
    for (std::int64_t r = begin + threadIdx.y; r < end; r += kSumLanes) sum += Element<T>::load(g[r * cols + c]);
  }
  tile[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    Acc total = 0;
    for (int lane = 0; lane < kSumLanes; ++lane) total += tile[lane][threadIdx.x];
    partial[static_cast<std::int64_t>(blockIdx.y) * cols + c] = total;
  }
}

template <class T, class Acc>
__global__ void finish_sums_kernel(const Acc* partial, std::int64_t slabs, std::int64_t cols, T* out,
                                   std::int64_t out_stride) {
  for (std::int64_t c = first_index(); c < cols; c += index_step()) {
    Acc total = 0;
    for (std::int64_t s = 0; s < slabs; ++s) total += partial[s * cols + c];
    out[c * out_stride] = Element<T>::store(total);
  }
}

void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

}  // namespace

Strided strided_of(const TensorView& view) {
  if (view.ndim() > kMaxDims) {
    throw shape_error("sketchcore: CUDA arrays with more than " + std::to_string(kMaxDims) +
                      " dimensions are not supported, got " + std::to_string(view.ndim()));
  }
  Strided s;
  s.ndim = view.ndim();
  for (int k = 0; k < s.ndim; ++k) {
    s.shape[k] = view.size(k);
    s.stride[k] = view.stride(k);
  }
  return s;
}

namespace {
Strided with_compact_strides(Strided s) {
  std::int64_t stride = 1;
  for (int k = s.ndim - 1; k >= 0; --k) {
    s.stride[k] = stride;
    stride *= s.shape[k];
  }
  return s;
}
}  // namespace

Strided compact(std::initializer_list<std::int64_t> shape) {
  Strided s;
  s.ndim = static_cast<int>(shape.size());
  int k = 0;
  for (std::int64_t extent : shape) s.shape[k++] = extent;
  return with_compact_strides(s);
}

Strided compact_like(const TensorView& view) { return with_compact_strides(strided_of(view)); }

RowLayout row_layout_of(const TensorView& view) {
  if (view.ndim() > kMaxDims) strided_of(view);  // throws the dimension error
  RowLayout layout;
  layout.lead_ndim = view.ndim() - 1;
  for (int k = 0; k < layout.lead_ndim; ++k) {
    layout.lead_shape[k] = view.size(k);
    layout.lead_stride[k] = view.stride(k);
  }
  layout.col_stride = view.stride(-1);
  return layout;
}

RowLayout row_layout_compact(std::int64_t ld) {
  RowLayout layout;
  layout.lead_ndim = 1;
  layout.lead_shape[0] = INT64_MAX;
  layout.lead_stride[0] = ld;
  return layout;
}

template <class T>
void copy_strided(const T* src, const Strided& src_layout, T* dst, const Strided& dst_layout, cudaStream_t stream) {
  std::int64_t n = 1;
  for (int k = 0; k < src_layout.ndim; ++k) n *= src_layout.shape[k];
  if (n == 0) return;
  copy_strided_kernel<<<blocks_for(n), kThreads, 0, stream>>>(src, src_layout, dst, dst_layout, n);
  check_launch("copy_strided_kernel");
}

template <class T>
void epilogue_forward(const T* src, const RowLayout& src_layout, T* out, const RowLayout& out_layout,
                      std::int64_t rows, std::int64_t cols, const EpilogueArgs<T>& epilogue, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  const unsigned grid = blocks_for(rows * ((cols + kGroup - 1) / kGroup));
  const bool quad = quad_aligned(src, src_layout, cols) && quad_aligned<T>(out, out_layout, cols);
  detail::visit_activation(epilogue.activation, [&](auto act, auto) {
    using Act = decltype(act);
    if (quad) {
      forward_kernel<T, Act, true><<<grid, kThreads, 0, stream>>>(src, src_layout, out, out_layout, rows, cols,
                                                                  epilogue, act);
    } else {
      forward_kernel<T, Act, false><<<grid, kThreads, 0, stream>>>(src, src_layout, out, out_layout, rows, cols,
                                                                   epilogue, act);
    }
  });
  check_launch("forward_kernel");
}

template <class T>
void epilogue_backward(const T* dy, const RowLayout& dy_layout, const T* h, T* g, std::int64_t rows,
                       std::int64_t cols, const EpilogueArgs<T>& epilogue, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  const bool uses_h = epilogue.activation != Activation::none;
  const unsigned grid = blocks_for(rows * ((cols + kGroup - 1) / kGroup));
  const RowLayout compact = row_layout_compact(cols);
  const bool quad_g = quad_aligned<T>(g, compact, cols) && (!uses_h || quad_aligned(h, compact, cols));
  const bool quad_dy = quad_g && quad_aligned(dy, dy_layout, cols);
  detail::visit_activation(epilogue.activation, [&](auto, auto grad) {
    using Grad = decltype(grad);
    if (quad_dy) {
      backward_kernel<T, Grad, true, true><<<grid, kThreads, 0, stream>>>(dy, dy_layout, h, g, rows, cols, epilogue,
                                                                          grad, uses_h);
    } else if (quad_g) {
      backward_kernel<T, Grad, false, true><<<grid, kThreads, 0, stream>>>(dy, dy_layout, h, g, rows, cols,
                                                                           epilogue, grad, uses_h);
    } else {
      backward_kernel<T, Grad, false, false><<<grid, kThreads, 0, stream>>>(dy, dy_layout, h, g, rows, cols,
                                                                            epilogue, grad, uses_h);
    }
  });
  check_launch("backward_kernel");
}

template <class T>
void column_sums(const T* g, std::int64_t rows, std::int64_t cols, void* partial, T* out, std::int64_t out_stride,
                 cudaStream_t stream) {
  using Acc = typename Element<T>::Compute;
  if (cols == 0) return;
  const std::int64_t slabs = column_sum_slabs(rows);
  const std::int64_t slab_rows = (rows + slabs - 1) / slabs;
  auto* acc = static_cast<Acc*>(partial);
  const dim3 grid(static_cast<unsigned>((cols + kSumCols - 1) / kSumCols), static_cast<unsigned>(slabs));
  slab_sums_kernel<T, Acc><<<grid, dim3(kSumCols, kSumLanes), 0, stream>>>(g, rows, cols, slab_rows, acc);
  check_launch("slab_sums_kernel");
  finish_sums_kernel<T, Acc><<<blocks_for(cols), kThreads, 0, stream>>>(acc, slabs, cols, out, out_stride);
  check_launch("finish_sums_kernel");
}

std::int64_t column_sum_slabs(std::int64_t rows) {
  return std::clamp<std::int64_t>(rows / 512, 1, 64);
}

template <class T>
void fill_zero(T* dst, std::int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  check(cudaMemsetAsync(dst, 0, static_cast<std::size_t>(count) * sizeof(T), stream), "cudaMemsetAsync");
}

#define SKETCHCORE_INSTANTIATE(T)                                                                                    \
  template void copy_strided<T>(const T*, const Strided&, T*, const Strided&, cudaStream_t);                        \
  template void epilogue_forward<T>(const T*, const RowLayout&, T*, const RowLayout&, std::int64_t, std::int64_t,   \
                                    const EpilogueArgs<T>&, cudaStream_t);                                       \
  template void epilogue_backward<T>(const T*, const RowLayout&, const T*, T*, std::int64_t, std::int64_t,           \
                                     const EpilogueArgs<T>&, cudaStream_t);                                      \
  template void column_sums<T>(const T*, std::int64_t, std::int64_t, void*, T*, std::int64_t, cudaStream_t);        \
  template void fill_zero<T>(T*, std::int64_t, cudaStream_t);

SKETCHCORE_INSTANTIATE(__half)
SKETCHCORE_INSTANTIATE(__nv_bfloat16)
SKETCHCORE_INSTANTIATE(float)
SKETCHCORE_INSTANTIATE(double)

#undef SKETCHCORE_INSTANTIATE

}  // namespace sketchcore::cuda
