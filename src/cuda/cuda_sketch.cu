// The sketching operators on a CUDA device, on the calling thread's stream:
//  * dense kinds are generated on the device from the shared entry mapping (the CPU's
//    bits) and applied tile by tile with cuBLASLt;
//  * sparse kinds and SRHT take their random structure from the CPU code (the same
//    structure, so the same operator), copied to the device once per call; sparse
//    operators are applied as gathers that sum each output in a fixed order (no atomics),
//    SRHT by scatter, fast Walsh–Hadamard transform and gather.
// Temporaries come from the stream-ordered pool.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cuda_common.cuh"
#include "cuda_ops.cuh"
#include "detail/layout.hpp"
#include "device_pool.cuh"
#include "kernels.cuh"
#include "lt_gemm.cuh"
#include "sketch/structure.hpp"
#include "sketch_kernels.cuh"
#include "sketchcore/errors.hpp"
#include "sketchcore/sketch.hpp"

namespace sketchcore::detail {

namespace {

using cuda::DeviceBuffer;
using cuda::DeviceMatrix;
using cuda::Matrix2d;

/// Budget of one temporary (a generated tile, an SRHT work block).
constexpr std::int64_t kWorkBytes = std::int64_t{64} << 20;

/// Host memory that copies on the stream still read: released by a host function queued
/// after them, so the call does not wait for the device. If it cannot be queued (or an
/// exception unwinds first), the stream is synchronised before the memory goes.
template <class Held>
class StagedHost {
 public:
  StagedHost(Held&& held, cudaStream_t stream) : held_(std::make_unique<Held>(std::move(held))), stream_(stream) {}
  ~StagedHost() {
    if (!held_) return;
    if (cudaLaunchHostFunc(stream_, &release, held_.get()) == cudaSuccess) {
      held_.release();
    } else {
      cudaStreamSynchronize(stream_);
    }
  }
  StagedHost(const StagedHost&) = delete;
  StagedHost& operator=(const StagedHost&) = delete;
  const Held& operator*() const { return *held_; }
  const Held* operator->() const { return held_.get(); }

 private:
  static void release(void* held) { delete static_cast<Held*>(held); }
  std::unique_ptr<Held> held_;
  cudaStream_t stream_;
};

/// `count` elements of host `data` copied into a new device buffer, in stream order.
template <class U>
DeviceBuffer upload(int device, const U* data, std::int64_t count, cudaStream_t stream) {
  DeviceBuffer buffer(device, sizeof(U) * static_cast<std::size_t>(std::max<std::int64_t>(count, 1)), stream);
  if (count > 0) {
    cuda::check(cudaMemcpyAsync(buffer.as<U>(), data, sizeof(U) * static_cast<std::size_t>(count),
                                cudaMemcpyHostToDevice, stream),
                "copying a sketch's structure to the device");
  }
  return buffer;
}

template <class T>
Matrix2d<T> matrix_of(const TensorView& v) {
  return {static_cast<T*>(v.data()), v.size(0), v.size(1), v.stride(0), v.stride(1)};
}

// --------------------------------------------------------------------------- to_dense

template <class T>
void to_dense_on_device(const SketchOperator& op, const TensorView& out, std::int64_t row0, std::int64_t col0,
                        int device, cudaStream_t stream) {
  const Matrix2d<T> o = matrix_of<T>(out);
  const double scale = entry_scale(op);
  if (is_dense_kind(op.kind)) {
    cuda::generate_dense<T>(op, row0, col0, scale, o, stream);
  } else if (is_sparse_kind(op.kind)) {
    const StagedHost<SparseStructure> s(sparse_structure(op, col0, o.cols), stream);
    const std::int64_t nnz = sparse_nnz(op);
    const DeviceBuffer rows = upload(device, s->rows.data(), o.cols * nnz, stream);
    const DeviceBuffer signs = upload(device, s->signs.data(), o.cols * nnz, stream);
    cuda::zero_matrix<T>(o, stream);
    cuda::scatter_sparse_columns<T>(rows.as<std::int32_t>(), signs.as<std::int8_t>(), nnz, row0, scale, o, stream);
  } else {
    const StagedHost<SrhtStructure> s(srht_structure(op), stream);
    const DeviceBuffer rows = upload(device, s->rows.data() + row0, o.rows, stream);
    const DeviceBuffer signs = upload(device, s->signs.data() + col0, o.cols, stream);
    cuda::srht_entries<T>(rows.as<std::int32_t>(), signs.as<std::int8_t>(), col0, scale, o, stream);
  }
}

// ----------------------------------------------------------------------------- apply
//
// The four products, as on the CPU:
//   left  S·A  (A: n × p → m × p)      right  A·S  (A: q × m → q × n)
//   left  Sᵀ·A (A: m × p → n × p)      right  A·Sᵀ (A: q × n → q × m)

/// Dense kinds: S generated in column tiles into pooled memory, multiplied by cuBLASLt.
template <class T>
void apply_dense(const SketchOperator& op, Side side, bool transpose, const TensorView& a, const TensorView& out,
                 int device, cudaStream_t stream) {
  const std::int64_t m = op.rows, n = op.cols, a_rows = a.size(0), a_cols = a.size(1);
  const double scale = entry_scale(op);
  const bool tf32 = current_execution().allow_tf32;
  DeviceBuffer a_packed, out_staged;
  std::optional<DeviceMatrix> am = cuda::in_place(a);
  if (!am) {
    a_packed = DeviceBuffer(device, sizeof(T) * static_cast<std::size_t>(a.numel()), stream);
    cuda::copy_strided<T>(static_cast<const T*>(a.data()), cuda::strided_of(a), a_packed.as<T>(),
                          cuda::compact_like(a), stream);
    am = DeviceMatrix{a_packed.as<T>(), false, a_cols};
  }
  std::optional<DeviceMatrix> out_direct = cuda::in_place(out);
  if (out_direct && out_direct->transposed) out_direct.reset();
  T* o = nullptr;
  std::int64_t ldo = out.size(1);
  if (out_direct) {
    o = static_cast<T*>(out.data());
    ldo = out_direct->ld;
  } else {
    out_staged = DeviceBuffer(device, sizeof(T) * static_cast<std::size_t>(out.numel()), stream);
    o = out_staged.as<T>();
  }
  const std::int64_t width =
      std::min(n, std::max<std::int64_t>(64, kWorkBytes / (m * static_cast<std::int64_t>(sizeof(T)))));
  const DeviceBuffer tile_buffer(device, sizeof(T) * static_cast<std::size_t>(m * width), stream);
  T* tile = tile_buffer.as<T>();
  const DType dtype = a.dtype();
  const cuda::LtEpilogue none;
  for (std::int64_t j0 = 0; j0 < n; j0 += width) {
    const std::int64_t w = std::min(width, n - j0);
    cuda::generate_dense<T>(op, 0, j0, 1.0, Matrix2d<T>{tile, m, w, w, 1}, stream);  // S[:, J], m × w
    const DeviceMatrix t{tile, false, w};
    const double beta = j0 == 0 ? 0.0 : 1.0;
    if (side == Side::left && !transpose) {  // out += S[:, J] · A[J, :]
      cuda::lt_gemm(device, dtype, m, a_cols, w, scale, t, cuda::rows_from<T>(*am, j0), beta, o, ldo, none, tf32,
                    stream);
    } else if (side == Side::right && !transpose) {  // out[:, J] = A · S[:, J]
      cuda::lt_gemm(device, dtype, a_rows, w, m, scale, *am, t, 0.0, o + j0, ldo, none, tf32, stream);
    } else if (side == Side::left) {  // out[J, :] = S[:, J]ᵀ · A
      cuda::lt_gemm(device, dtype, w, a_cols, m, scale, cuda::transposed(t), *am, 0.0, o + j0 * ldo, ldo, none, tf32,
                    stream);
    } else {  // out += A[:, J] · S[:, J]ᵀ
      cuda::lt_gemm(device, dtype, a_rows, m, w, scale, cuda::cols_from<T>(*am, j0), cuda::transposed(t), beta, o,
                    ldo, none, tf32, stream);
    }
  }
  if (!out_direct) {
    cuda::copy_strided<T>(o, cuda::compact_like(out), static_cast<T*>(out.data()), cuda::strided_of(out), stream);
  }
}

/// A sparse operator on the device, listed by column (CSC) and by row (CSR).
struct DeviceSparse {
  DeviceBuffer column_offsets, column_rows, column_signs;
  DeviceBuffer row_offsets, row_cols, row_signs;
  cuda::SparseLists by_column() const {
    return {column_offsets.as<std::int64_t>(), column_rows.as<std::int32_t>(), column_signs.as<std::int8_t>()};
  }
  cuda::SparseLists by_row() const {
    return {row_offsets.as<std::int64_t>(), row_cols.as<std::int32_t>(), row_signs.as<std::int8_t>()};
  }
};

/// The host structures a DeviceSparse was copied from (kept until the copies ran).
struct HostSparse {
  SparseStructure by_column;
  SparseByRow by_row;
  Scratch<std::int64_t> column_offsets;
};

DeviceSparse upload_sparse(const SketchOperator& op, const HostSparse& host, int device, cudaStream_t stream) {
  const std::int64_t total = op.cols * sparse_nnz(op);
  DeviceSparse d;
  d.column_offsets = upload(device, host.column_offsets.data(), op.cols + 1, stream);
  d.column_rows = upload(device, host.by_column.rows.data(), total, stream);
  d.column_signs = upload(device, host.by_column.signs.data(), total, stream);
  d.row_offsets = upload(device, host.by_row.offsets.data(), op.rows + 1, stream);
  d.row_cols = upload(device, host.by_row.cols.data(), total, stream);
  d.row_signs = upload(device, host.by_row.signs.data(), total, stream);
  return d;
}

HostSparse host_sparse(const SketchOperator& op) {
  SparseStructure by_column = sparse_structure(op);
  SparseByRow by_row = sparse_by_row(op, by_column);
  Scratch<std::int64_t> offsets(op.cols + 1);
  for (std::int64_t j = 0; j <= op.cols; ++j) offsets.data()[j] = j * sparse_nnz(op);
  return {std::move(by_column), std::move(by_row), std::move(offsets)};
}

/// Every output element is a gather over one list: a column of S (CSC) when the output's
/// index runs over S's columns (Sᵀ·A, A·S), a row of S (CSR) when it runs over S's rows.
template <class T>
void apply_sparse(const DeviceSparse& s, double scale, Side side, bool transpose, const TensorView& a,
                  const TensorView& out, cudaStream_t stream) {
  const bool left = side == Side::left;
  const cuda::SparseLists lists = left == transpose ? s.by_column() : s.by_row();
  const auto* a_data = static_cast<const T*>(a.data());
  auto* o = static_cast<T*>(out.data());
  if (left) {  // out(l, f) = scale · Σ ± A(index, f)
    cuda::sparse_gather<T>(lists, scale, a_data, a.stride(0), a.stride(1), o, out.stride(0), out.stride(1),
                           out.size(0), out.size(1), stream);
  } else {  // out(f, l) = scale · Σ ± A(f, index)
    cuda::sparse_gather<T>(lists, scale, a_data, a.stride(1), a.stride(0), o, out.stride(1), out.stride(0),
                           out.size(1), out.size(0), stream);
  }
}

/// SRHT's structure on the device.
struct DeviceSrht {
  std::int64_t padded;
  DeviceBuffer signs, rows;
};

/// SRHT: the columns (left) or rows (right) of A go through D / Rᵀ, the transform H and
/// R / D, a block of them at a time.
template <class T>
void apply_srht(const SketchOperator& op, const DeviceSrht& s, Side side, bool transpose, const TensorView& a,
                const TensorView& out, int device, cudaStream_t stream) {
  using C = typename cuda::Element<T>::Compute;
  const std::int64_t m = op.rows, n = op.cols, np = s.padded;
  const double scale = entry_scale(op);
  const auto* signs = s.signs.as<std::int8_t>();
  const auto* sampled = s.rows.as<std::int32_t>();
  const bool left = side == Side::left;
  // Left: block column c is column c0 + c of A and out. Right: it is row c0 + c.
  const std::int64_t columns = left ? a.size(1) : a.size(0);
  const std::int64_t a_t = left ? a.stride(0) : a.stride(1), a_c = left ? a.stride(1) : a.stride(0);
  const std::int64_t o_t = left ? out.stride(0) : out.stride(1), o_c = left ? out.stride(1) : out.stride(0);
  const std::int64_t width =
      std::clamp<std::int64_t>(kWorkBytes / (np * static_cast<std::int64_t>(sizeof(C))), 1, columns);
  const DeviceBuffer block(device, sizeof(C) * static_cast<std::size_t>(np * width), stream);
  // S·A and A·Sᵀ take D first and R last; Sᵀ·A and A·S take Rᵀ first and D last.
  const bool signs_first = left != transpose;
  for (std::int64_t c0 = 0; c0 < columns; c0 += width) {
    const std::int64_t w = std::min(width, columns - c0);
    const cuda::HadamardBlock<C> hb{block.as<C>(), np, w, left ? w : 1, left ? 1 : np};
    cuda::fill_zero<C>(hb.data, np * w, stream);
    const T* a_block = static_cast<const T*>(a.data()) + c0 * a_c;
    T* o_block = static_cast<T*>(out.data()) + c0 * o_c;
    if (signs_first) {
      cuda::srht_scatter<T, C>(a_block, a_t, a_c, n, signs, nullptr, hb, stream);
      cuda::fwht<C>(hb, stream);
      cuda::srht_gather<T, C>(hb, m, nullptr, sampled, scale, o_block, o_t, o_c, stream);
    } else {
      cuda::srht_scatter<T, C>(a_block, a_t, a_c, m, nullptr, sampled, hb, stream);
      cuda::fwht<C>(hb, stream);
      cuda::srht_gather<T, C>(hb, n, signs, nullptr, scale, o_block, o_t, o_c, stream);
    }
  }
}

template <class T>
void apply_on_device(const SketchOperator& op, const std::vector<TensorView>& a, const std::vector<TensorView>& out,
                     Side side, bool transpose, int device, cudaStream_t stream) {
  if (is_dense_kind(op.kind)) {
    for (std::size_t b = 0; b < a.size(); ++b) apply_dense<T>(op, side, transpose, a[b], out[b], device, stream);
  } else if (is_sparse_kind(op.kind)) {
    const StagedHost<HostSparse> host(host_sparse(op), stream);
    const DeviceSparse s = upload_sparse(op, *host, device, stream);
    const double scale = entry_scale(op);
    for (std::size_t b = 0; b < a.size(); ++b) apply_sparse<T>(s, scale, side, transpose, a[b], out[b], stream);
  } else {
    const StagedHost<SrhtStructure> host(srht_structure(op), stream);
    const DeviceSrht s{host->padded, upload(device, host->signs.data(), host->padded, stream),
                       upload(device, host->rows.data(), op.rows, stream)};
    for (std::size_t b = 0; b < a.size(); ++b) apply_srht<T>(op, s, side, transpose, a[b], out[b], device, stream);
  }
}

/// Sparse and SRHT sketches stage their structure in host memory per call and free it from a
/// host function: captured in a CUDA graph, every replay would read (and free) that memory
/// again. Refused with a clear error instead; dense kinds capture cleanly.
void refuse_graph_capture(const SketchOperator& op, cudaStream_t stream, const char* what) {
  if (is_dense_kind(op.kind)) return;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cuda::check(cudaStreamIsCapturing(stream, &status), "cudaStreamIsCapturing");
  if (status != cudaStreamCaptureStatusNone) {
    throw cuda_error(std::string(what) + ": a " + sketch_kind_name(op.kind) +
                     " sketch cannot run inside CUDA graph capture (its structure is staged from host "
                     "memory on each call); apply it outside the captured region, or use a dense kind");
  }
}

}  // namespace

}  // namespace sketchcore::detail

namespace sketchcore::cuda {

void sketch_to_dense_on_device(const SketchOperator& op, const TensorView& out, std::int64_t row0,
                               std::int64_t col0) {
  const int device = out.device().index;
  const DeviceGuard guard(device);
  const cudaStream_t stream = current_stream();
  detail::refuse_graph_capture(op, stream, "sketch.to_dense");
  dispatch_dtype(out.dtype(), [&](auto tag) {
    detail::to_dense_on_device<decltype(tag)>(op, out, row0, col0, device, stream);
  });
}

void sketch_apply_on_device(const detail::SketchApplyProblem& p) {
  std::vector<TensorView> a_matrices, out_matrices;
  const auto a_offsets = detail::batch_offsets(p.a), out_offsets = detail::batch_offsets(p.out);
  for (std::size_t b = 0; b < a_offsets.size(); ++b) {
    a_matrices.push_back(detail::matrix_at(p.a, a_offsets[b]));
    out_matrices.push_back(detail::matrix_at(p.out, out_offsets[b]));
  }
  const int device = p.a.device().index;
  const DeviceGuard guard(device);
  const cudaStream_t stream = current_stream();
  detail::refuse_graph_capture(p.op, stream, "sketch.apply");
  dispatch_dtype(p.a.dtype(), [&](auto tag) {
    detail::apply_on_device<decltype(tag)>(p.op, a_matrices, out_matrices, p.side, p.transpose, device, stream);
  });
}

}  // namespace sketchcore::cuda
