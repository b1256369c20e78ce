#include "sketch_kernels.cuh"

#include <cstdint>

#include "cuda_common.cuh"
#include "launch.cuh"
#include "sketch/entries.hpp"

namespace sketchcore::cuda {

namespace {

/// A double rounded once to T (the CPU's static_cast for float and double).
template <class T> __device__ __forceinline__ T from_double(double v);
template <> __device__ __forceinline__ float from_double<float>(double v) { return static_cast<float>(v); }
template <> __device__ __forceinline__ double from_double<double>(double v) { return v; }
template <> __device__ __forceinline__ __half from_double<__half>(double v) { return __double2half(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_double<__nv_bfloat16>(double v) {
  return __double2bfloat16(v);
}

template <class T>
__device__ __forceinline__ T& at(const Matrix2d<T>& m, std::int64_t r, std::int64_t c) {
  return m.data[r * m.row_stride + c * m.col_stride];
}

template <class T>
__global__ void generate_dense_kernel(SketchKind kind, std::uint64_t seed, std::int64_t row0, std::int64_t col0,
                                      double scale, Matrix2d<T> out) {
  const std::int64_t first_group = row0 >> 2, row_end = row0 + out.rows;
  const std::int64_t n = (((row_end + 3) >> 2) - first_group) * out.cols;
  for (std::int64_t i = first_index(); i < n; i += index_step()) {
    const std::int64_t group = first_group + i / out.cols, c = i % out.cols;
    double values[4];
    detail::dense_block_values(kind, detail::dense_block(kind, seed, group * 4, col0 + c), values);
    const std::int64_t lo = row0 > group * 4 ? row0 : group * 4;
    const std::int64_t hi = row_end < group * 4 + 4 ? row_end : group * 4 + 4;
    for (std::int64_t r = lo; r < hi; ++r) at(out, r - row0, c) = from_double<T>(detail::mul_rn(scale, values[r & 3]));
  }
}

template <class T>
__global__ void zero_matrix_kernel(Matrix2d<T> out) {
  const std::int64_t n = out.rows * out.cols;
  for (std::int64_t i = first_index(); i < n; i += index_step()) at(out, i / out.cols, i % out.cols) = from_double<T>(0.0);
}

template <class T>
__global__ void scatter_sparse_columns_kernel(const std::int32_t* rows, const std::int8_t* signs, std::int64_t nnz,
                                              std::int64_t row0, double scale, Matrix2d<T> out) {
  const std::int64_t n = out.cols * nnz;
  for (std::int64_t e = first_index(); e < n; e += index_step()) {
    const std::int64_t r = rows[e] - row0;
    if (r >= 0 && r < out.rows) at(out, r, e / nnz) = from_double<T>(detail::mul_rn(scale, signs[e]));
  }
}

template <class T>
__global__ void srht_entries_kernel(const std::int32_t* sampled, const std::int8_t* signs, std::int64_t col0,
                                    double scale, Matrix2d<T> out) {
  const std::int64_t n = out.rows * out.cols;
  for (std::int64_t i = first_index(); i < n; i += index_step()) {
    const std::int64_t r = i / out.cols, c = i % out.cols;
    const int parity = __popc(static_cast<unsigned>(sampled[r]) & static_cast<unsigned>(col0 + c)) & 1;
    at(out, r, c) = from_double<T>(detail::mul_rn(detail::mul_rn(scale, signs[c]), parity ? -1.0 : 1.0));
  }
}

template <class T>
__global__ void sparse_gather_kernel(SparseLists lists, double scale, const T* a, std::int64_t a_index_stride,
                                     std::int64_t a_free_stride, T* out, std::int64_t out_list_stride,
                                     std::int64_t out_free_stride, std::int64_t list_count, std::int64_t free_count) {
  using E = Element<T>;
  using C = typename E::Compute;
  const std::int64_t n = list_count * free_count;
  for (std::int64_t i = first_index(); i < n; i += index_step()) {
    const std::int64_t l = i / free_count, f = i % free_count;
    C sum = C(0);
    for (std::int64_t e = lists.offsets[l]; e < lists.offsets[l + 1]; ++e) {
      const C v = E::load(a[lists.indices[e] * a_index_stride + f * a_free_stride]);
      sum = lists.signs[e] > 0 ? sum + v : sum - v;
    }
    out[l * out_list_stride + f * out_free_stride] = E::store(static_cast<C>(scale) * sum);
  }
}

/// Work item i as (t, c) of a count × width iteration: t fastest when the lines of the
/// block are contiguous (line_stride 1), else c fastest, so that neighbouring threads touch
/// neighbouring memory.
__device__ __forceinline__ void split(std::int64_t i, std::int64_t count, std::int64_t width, bool t_fastest,
                                      std::int64_t& t, std::int64_t& c) {
  if (t_fastest) {
    t = i % count;
    c = i / count;
  } else {
    c = i % width;
    t = i / width;
  }
}

template <class T, class C>
__global__ void srht_scatter_kernel(const T* a, std::int64_t a_t_stride, std::int64_t a_c_stride, std::int64_t count,
                                    const std::int8_t* signs, const std::int32_t* targets, HadamardBlock<C> w) {
  const std::int64_t n = count * w.width;
  for (std::int64_t i = first_index(); i < n; i += index_step()) {
    std::int64_t t, c;
    split(i, count, w.width, w.line_stride == 1, t, c);
    C v = Element<T>::load(a[t * a_t_stride + c * a_c_stride]);
    if (signs && signs[t] < 0) v = -v;
    const std::int64_t line = targets ? targets[t] : t;
    w.data[line * w.line_stride + c * w.col_stride] = v;
  }
}

template <class C>
__global__ void fwht_stage_kernel(HadamardBlock<C> w, std::int64_t half) {
  const std::int64_t pairs = w.length / 2, n = pairs * w.width;
  for (std::int64_t i = first_index(); i < n; i += index_step()) {
    std::int64_t p, c;
    split(i, pairs, w.width, w.line_stride == 1, p, c);
    const std::int64_t top = (p / half) * 2 * half + p % half;
    C* upper = w.data + top * w.line_stride + c * w.col_stride;
    C* lower = upper + half * w.line_stride;
    const C x = *upper, y = *lower;
    *upper = x + y;
    *lower = x - y;
  }
}

template <class T, class C>
__global__ void srht_gather_kernel(HadamardBlock<C> w, std::int64_t count, const std::int8_t* signs,
                                   const std::int32_t* sources, double scale, T* out, std::int64_t o_t_stride,
                                   std::int64_t o_c_stride) {
  const std::int64_t n = count * w.width;
  for (std::int64_t i = first_index(); i < n; i += index_step()) {
    std::int64_t t, c;
    split(i, count, w.width, w.line_stride == 1, t, c);
    const std::int64_t line = sources ? sources[t] : t;
    C v = static_cast<C>(scale) * w.data[line * w.line_stride + c * w.col_stride];
    if (signs && signs[t] < 0) v = -v;
    out[t * o_t_stride + c * o_c_stride] = Element<T>::store(v);
  }
}

void check_launch() { check(cudaGetLastError(), "launching a sketch kernel"); }

}  // namespace

template <class T>
void generate_dense(const SketchOperator& op, std::int64_t row0, std::int64_t col0, double scale,
                    const Matrix2d<T>& out, cudaStream_t stream) {
  const std::int64_t groups = ((row0 + out.rows + 3) >> 2) - (row0 >> 2);
  generate_dense_kernel<<<blocks_for(groups * out.cols), kThreads, 0, stream>>>(op.kind, op.seed, row0, col0, scale,
                                                                                 out);
  check_launch();
}

template <class T>
void zero_matrix(const Matrix2d<T>& out, cudaStream_t stream) {
  zero_matrix_kernel<<<blocks_for(out.rows * out.cols), kThreads, 0, stream>>>(out);
  check_launch();
}

template <class T>
void scatter_sparse_columns(const std::int32_t* rows, const std::int8_t* signs, std::int64_t nnz, std::int64_t row0,
                            double scale, const Matrix2d<T>& out, cudaStream_t stream) {
  scatter_sparse_columns_kernel<<<blocks_for(out.cols * nnz), kThreads, 0, stream>>>(rows, signs, nnz, row0, scale,
                                                                                      out);
  check_launch();
}

template <class T>
void srht_entries(const std::int32_t* sampled, const std::int8_t* signs, std::int64_t col0, double scale,
                  const Matrix2d<T>& out, cudaStream_t stream) {
  srht_entries_kernel<<<blocks_for(out.rows * out.cols), kThreads, 0, stream>>>(sampled, signs, col0, scale, out);
  check_launch();
}

template <class T>
void sparse_gather(const SparseLists& lists, double scale, const T* a, std::int64_t a_index_stride,
                   std::int64_t a_free_stride, T* out, std::int64_t out_list_stride, std::int64_t out_free_stride,
                   std::int64_t list_count, std::int64_t free_count, cudaStream_t stream) {
  sparse_gather_kernel<<<blocks_for(list_count * free_count), kThreads, 0, stream>>>(
      lists, scale, a, a_index_stride, a_free_stride, out, out_list_stride, out_free_stride, list_count, free_count);
  check_launch();
}

template <class T, class C>
void srht_scatter(const T* a, std::int64_t a_t_stride, std::int64_t a_c_stride, std::int64_t count,
                  const std::int8_t* signs, const std::int32_t* targets, const HadamardBlock<C>& w,
                  cudaStream_t stream) {
  srht_scatter_kernel<<<blocks_for(count * w.width), kThreads, 0, stream>>>(a, a_t_stride, a_c_stride, count, signs,
                                                                             targets, w);
  check_launch();
}

template <class C>
void fwht(const HadamardBlock<C>& w, cudaStream_t stream) {
  // One launch per stage: log2(length) passes over the block (each stage reads what the
  // previous one wrote, and a launch boundary orders them).
  for (std::int64_t half = 1; half < w.length; half *= 2) {
    fwht_stage_kernel<<<blocks_for(w.length / 2 * w.width), kThreads, 0, stream>>>(w, half);
    check_launch();
  }
}

template <class T, class C>
void srht_gather(const HadamardBlock<C>& w, std::int64_t count, const std::int8_t* signs,
                 const std::int32_t* sources, double scale, T* out, std::int64_t o_t_stride, std::int64_t o_c_stride,
                 cudaStream_t stream) {
  srht_gather_kernel<<<blocks_for(count * w.width), kThreads, 0, stream>>>(w, count, signs, sources, scale, out,
                                                                            o_t_stride, o_c_stride);
  check_launch();
}

#define SKETCHCORE_INSTANTIATE(T)                                                                                    \
  template void generate_dense<T>(const SketchOperator&, std::int64_t, std::int64_t, double, const Matrix2d<T>&,      \
                                  cudaStream_t);                                                                     \
  template void zero_matrix<T>(const Matrix2d<T>&, cudaStream_t);                                                    \
  template void scatter_sparse_columns<T>(const std::int32_t*, const std::int8_t*, std::int64_t, std::int64_t,        \
                                          double, const Matrix2d<T>&, cudaStream_t);                                 \
  template void srht_entries<T>(const std::int32_t*, const std::int8_t*, std::int64_t, double, const Matrix2d<T>&,   \
                                cudaStream_t);                                                                       \
  template void sparse_gather<T>(const SparseLists&, double, const T*, std::int64_t, std::int64_t, T*, std::int64_t, \
                                 std::int64_t, std::int64_t, std::int64_t, cudaStream_t);                            \
  template void srht_scatter<T, Element<T>::Compute>(const T*, std::int64_t, std::int64_t, std::int64_t,              \
                                                     const std::int8_t*, const std::int32_t*,                        \
                                                     const HadamardBlock<Element<T>::Compute>&, cudaStream_t);        \
  template void srht_gather<T, Element<T>::Compute>(const HadamardBlock<Element<T>::Compute>&, std::int64_t,          \
                                                    const std::int8_t*, const std::int32_t*, double, T*,             \
                                                    std::int64_t, std::int64_t, cudaStream_t);

SKETCHCORE_INSTANTIATE(__half)
SKETCHCORE_INSTANTIATE(__nv_bfloat16)
SKETCHCORE_INSTANTIATE(float)
SKETCHCORE_INSTANTIATE(double)
#undef SKETCHCORE_INSTANTIATE

template void fwht<float>(const HadamardBlock<float>&, cudaStream_t);
template void fwht<double>(const HadamardBlock<double>&, cudaStream_t);

}  // namespace sketchcore::cuda
