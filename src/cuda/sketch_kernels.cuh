// Kernels of the sketching operators on a CUDA device: dense entries generated from the
// shared host/device mapping (src/cpp/sketch/entries.hpp, the CPU's bits), sparse
// operators applied as fixed-order gathers (no atomics), and SRHT's scatter / fast
// Walsh–Hadamard transform / gather. All run on the given stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "sketchcore/sketch.hpp"

namespace sketchcore::cuda {

/// A strided 2-D view on the device: element (r, c) at data[r·row_stride + c·col_stride].
template <class T>
struct Matrix2d {
  T* data;
  std::int64_t rows, cols, row_stride, col_stride;
};

/// out(r, c) = scale · S[row0 + r, col0 + c] for a dense kind (gaussian, rademacher,
/// uniform): one thread per Philox block (four rows of one column).
template <class T>
void generate_dense(const SketchOperator& op, std::int64_t row0, std::int64_t col0, double scale,
                    const Matrix2d<T>& out, cudaStream_t stream);

/// out(r, c) = 0 everywhere.
template <class T>
void zero_matrix(const Matrix2d<T>& out, cudaStream_t stream);

/// Writes the nonzeros of sparse columns col0 … col0 + out.cols − 1 that fall in rows
/// row0 … row0 + out.rows − 1 into a zeroed `out`: column c's rows and signs are
/// rows/signs[c·nnz : (c + 1)·nnz].
template <class T>
void scatter_sparse_columns(const std::int32_t* rows, const std::int8_t* signs, std::int64_t nnz, std::int64_t row0,
                            double scale, const Matrix2d<T>& out, cudaStream_t stream);

/// out(r, c) = scale · signs[c] · (−1)^popcount(sampled[r] & (col0 + c)): the block of an
/// SRHT whose sampled rows start at `sampled` and whose signs start at column col0.
template <class T>
void srht_entries(const std::int32_t* sampled, const std::int8_t* signs, std::int64_t col0, double scale,
                  const Matrix2d<T>& out, cudaStream_t stream);

/// Lists of (index, sign) pairs: list l holds entries offsets[l] … offsets[l + 1] − 1.
struct SparseLists {
  const std::int64_t* offsets;
  const std::int32_t* indices;
  const std::int8_t* signs;
};

/// out(l, f) = scale · Σ_e signs[e] · a(indices[e], f) over the entries e of list l, summed in
/// list order. `a` is addressed as a(i, f) = a[i·a_index_stride + f·a_free_stride], out as
/// out[l·out_list_stride + f·out_free_stride]; lists × free outputs.
template <class T>
void sparse_gather(const SparseLists& lists, double scale, const T* a, std::int64_t a_index_stride,
                   std::int64_t a_free_stride, T* out, std::int64_t out_list_stride, std::int64_t out_free_stride,
                   std::int64_t list_count, std::int64_t free_count, cudaStream_t stream);

/// The work block of an SRHT application: `length` (a power of two) lines × `width`
/// columns of the compute type C; element (l, c) at data[l·line_stride + c·col_stride].
template <class C>
struct HadamardBlock {
  C* data;
  std::int64_t length, width, line_stride, col_stride;
};

/// w(target(t), c) = sign(t) · a(t, c) for t < count, c < w.width, where target(t) =
/// targets ? targets[t] : t and sign(t) = signs ? signs[t] : 1; a(t, c) =
/// a[t·a_t_stride + c·a_c_stride]. Other lines of `w` are left as they are.
template <class T, class C>
void srht_scatter(const T* a, std::int64_t a_t_stride, std::int64_t a_c_stride, std::int64_t count,
                  const std::int8_t* signs, const std::int32_t* targets, const HadamardBlock<C>& w,
                  cudaStream_t stream);

/// Unnormalized fast Walsh–Hadamard transform of every column of `w` along its lines.
template <class C>
void fwht(const HadamardBlock<C>& w, cudaStream_t stream);

/// out(t, c) = scale · sign(t) · w(source(t), c) for t < count, c < w.width (source and
/// sign as in srht_scatter); out(t, c) = out[t·o_t_stride + c·o_c_stride].
template <class T, class C>
void srht_gather(const HadamardBlock<C>& w, std::int64_t count, const std::int8_t* signs,
                 const std::int32_t* sources, double scale, T* out, std::int64_t o_t_stride, std::int64_t o_c_stride,
                 cudaStream_t stream);

}  // namespace sketchcore::cuda
