// Public sketching entry points: validation, dense generation and application on the CPU.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "detail/blas.hpp"
#include "detail/check.hpp"
#include "detail/checked.hpp"
#include "detail/cuda_probe.hpp"
#include "detail/parallel.hpp"
#include "detail/scratch.hpp"
#include "detail/strided.hpp"
#include "sketch/entries.hpp"
#include "sketch/fwht.hpp"
#include "sketch/structure.hpp"
#include "sketchcore/errors.hpp"
#include "sketchcore/sketch.hpp"

namespace sketchcore {

namespace {

constexpr SketchKind kKinds[] = {SketchKind::gaussian,    SketchKind::rademacher,  SketchKind::uniform,
                                 SketchKind::sparse_sign, SketchKind::countsketch, SketchKind::srht};
constexpr std::int64_t kMaxExtent = (std::int64_t{1} << 31) - 1;
/// Budget of a generated tile of a dense operator.
constexpr std::int64_t kTileBytes = std::int64_t{4} << 20;

using detail::is_dense_kind;
using detail::is_sparse_kind;
using detail::sparse_nnz;

bool on_cuda(const TensorView& v) { return v.device().type == DeviceType::cuda; }

/// CPU arrays of float32/float64; with the CUDA backend, CUDA arrays of any floating type.
/// `like` (a) fixes the dtype and device of `out`.
void check_array(const TensorView& v, const char* op, const char* name, const TensorView* like = nullptr) {
  const bool cuda = detail::cuda_compiled();
  if (v.device().type != DeviceType::cpu && !(cuda && on_cuda(v))) {
    detail::fail<device_error>(op, name,
                               cuda ? "an array in CPU or CUDA memory"
                                    : "an array in CPU memory (this build of sketchcore has no CUDA backend)",
                               device_name(v.device()));
  }
  if (like && v.device() != like->device()) {
    detail::fail<device_error>(op, name, "an array on " + device_name(like->device()) + " (the device of a)",
                               device_name(v.device()));
  }
  const bool cpu_dtype = v.dtype() == DType::float32 || v.dtype() == DType::float64;
  if (!cpu_dtype && !on_cuda(v)) {
    detail::fail<dtype_error>(op, name, "dtype float32 or float64 (float16 and bfloat16 too on a CUDA device)",
                              dtype_name(v.dtype()));
  }
  if (like && v.dtype() != like->dtype()) {
    detail::fail<dtype_error>(op, name, std::string("dtype ") + dtype_name(like->dtype()) + " (the dtype of a)",
                              dtype_name(v.dtype()));
  }
  detail::check_addressable(op, name, v);
}

// ------------------------------------------------------------------- dense generation

/// Writes S[i0 : i1, j0 : j1] (times `scale`) to dst[(i − i0)·rs + (j − j0)·cs], sweeping
/// each group of four rows (one Philox block per column) along the columns, so that a
/// row-major destination is written as four sequential streams. Parallel over groups.
template <class T>
void dense_block_into(const SketchOperator& op, std::int64_t i0, std::int64_t i1, std::int64_t j0, std::int64_t j1,
                      double scale, T* dst, std::int64_t rs, std::int64_t cs) {
  const std::int64_t first_group = i0 >> 2, groups = ((i1 + 3) >> 2) - first_group;
  const std::int64_t grain = std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(j1 - j0, 1));
  detail::parallel_for(groups, grain, [&](std::int64_t g0, std::int64_t g1) {
    double values[4];
    for (std::int64_t g = first_group + g0; g < first_group + g1; ++g) {
      const std::int64_t lo = std::max(i0, g * 4), hi = std::min(i1, g * 4 + 4);
      for (std::int64_t j = j0; j < j1; ++j) {
        detail::dense_block_values(op.kind, detail::dense_block(op.kind, op.seed, lo, j), values);
        for (std::int64_t i = lo; i < hi; ++i) dst[(i - i0) * rs + (j - j0) * cs] = static_cast<T>(scale * values[i & 3]);
      }
    }
  });
}

/// S[:, j0 : j0 + width] into a row-major (rows × width) tile.
template <class T>
void dense_tile(const SketchOperator& op, std::int64_t j0, std::int64_t width, double scale, T* tile) {
  dense_block_into(op, 0, op.rows, j0, j0 + width, scale, tile, width, 1);
}

// --------------------------------------------------------------------- 2-D operands

/// A row-major matrix with unit column stride.
template <class T>
struct Mat {
  T* data;
  std::int64_t rows, cols, ld;
  T* row(std::int64_t i) const { return data + i * ld; }
};

/// `v` (2-D) as a row-major matrix, packed into `scratch` unless already row-major.
template <class T>
Mat<T> readable(const TensorView& v, detail::Scratch<T>& scratch) {
  const std::int64_t r = v.size(0), c = v.size(1), rs = v.stride(0), cs = v.stride(1);
  if ((c <= 1 || cs == 1) && (r <= 1 || rs >= std::max<std::int64_t>(c, 1))) {
    return {static_cast<T*>(v.data()), r, c, r <= 1 ? std::max<std::int64_t>(c, 1) : rs};
  }
  detail::pack_rows<T>(v, scratch.allocate(r * c));
  return {scratch.data(), r, c, std::max<std::int64_t>(c, 1)};
}

/// Where to write `v` (2-D): itself if row-major, else `scratch` (copied back by finish()).
template <class T>
Mat<T> writable(const TensorView& v, detail::Scratch<T>& scratch, bool& staged) {
  const std::int64_t r = v.size(0), c = v.size(1), rs = v.stride(0), cs = v.stride(1);
  staged = !((c <= 1 || cs == 1) && (r <= 1 || rs >= std::max<std::int64_t>(c, 1)));
  if (!staged) return {static_cast<T*>(v.data()), r, c, r <= 1 ? std::max<std::int64_t>(c, 1) : rs};
  return {scratch.allocate(r * c), r, c, std::max<std::int64_t>(c, 1)};
}

// ------------------------------------------------------------------------- applying
//
// Four products, each computed directly (never through a transposed copy of an operand):
//   left  S·A  (A: n × p → m × p)      right  A·S  (A: q × m → q × n)
//   left  Sᵀ·A (A: m × p → n × p)      right  A·Sᵀ (A: q × n → q × m)

/// Rows from r0 / columns from c0 of a BLAS operand of either layout.
template <class T>
detail::BlasMatrix<T> from_row(const detail::BlasMatrix<T>& a, std::int64_t r0) {
  return {a.data + (a.transposed ? r0 : r0 * a.ld), a.transposed, a.ld};
}
template <class T>
detail::BlasMatrix<T> from_col(const detail::BlasMatrix<T>& a, std::int64_t c0) {
  return {a.data + (a.transposed ? c0 * a.ld : c0), a.transposed, a.ld};
}

/// Dense kinds: S generated in column tiles of `width` into pooled memory, then BLAS.
template <class T>
void apply_dense(const SketchOperator& op, Side side, bool transpose, const detail::BlasMatrix<T>& a,
                 std::int64_t a_rows, std::int64_t a_cols, const Mat<T>& out) {
  const std::int64_t m = op.rows, n = op.cols;
  const T scale = static_cast<T>(detail::entry_scale(op));
  const std::int64_t width = std::min(n, std::max<std::int64_t>(64, kTileBytes / (m * std::int64_t(sizeof(T)))));
  detail::Scratch<T> tile_buffer(m * width);
  T* tile = tile_buffer.data();
  for (std::int64_t j0 = 0; j0 < n; j0 += width) {
    const std::int64_t w = std::min(width, n - j0);
    dense_tile<T>(op, j0, w, 1.0, tile);  // S[:, j0 : j0 + w], m × w
    const detail::BlasMatrix<T> t{tile, false, w}, t_transposed{tile, true, w};
    const T beta = j0 == 0 ? T(0) : T(1);
    if (side == Side::left && !transpose) {  // out += S[:, J] · A[J, :]
      detail::gemm<T>(m, a_cols, w, scale, t, from_row(a, j0), out.data, out.ld, beta);
    } else if (side == Side::right && !transpose) {  // out[:, J] = A · S[:, J]
      detail::gemm<T>(a_rows, w, m, scale, a, t, out.data + j0, out.ld);
    } else if (side == Side::left) {  // out[J, :] = S[:, J]ᵀ · A
      detail::gemm<T>(w, a_cols, m, scale, t_transposed, a, out.row(j0), out.ld);
    } else {  // out += A[:, J] · S[:, J]ᵀ
      detail::gemm<T>(a_rows, m, w, scale, from_col(a, j0), t_transposed, out.data, out.ld, beta);
    }
  }
}

/// Sparse kinds: loops over the nnz nonzeros of each column of S.
template <class T>
void apply_sparse(const SketchOperator& op, Side side, bool transpose, const Mat<T>& a, const Mat<T>& out) {
  const detail::SparseStructure s = detail::sparse_structure(op);
  const std::int64_t n = op.cols, nnz = sparse_nnz(op);
  const double scale = detail::entry_scale(op);
  auto value = [&](std::int64_t j, std::int64_t k) { return static_cast<T>(scale * s.signs[static_cast<std::size_t>(j * nnz + k)]); };
  auto row_of = [&](std::int64_t j, std::int64_t k) { return std::int64_t(s.rows[static_cast<std::size_t>(j * nnz + k)]); };
  if (side == Side::left && !transpose) {  // out[r, :] = Σ v · A[j, :] over row r's nonzeros (as on CUDA)
    const detail::SparseByRow by_row = detail::sparse_by_row(op, s);
    detail::parallel_for(out.rows, 16, [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r) {
        T* dst = out.row(r);
        std::fill(dst, dst + out.cols, T(0));
        for (std::int64_t e = by_row.offsets[static_cast<std::size_t>(r)]; e < by_row.offsets[static_cast<std::size_t>(r + 1)]; ++e) {
          const T v = static_cast<T>(scale * by_row.signs[static_cast<std::size_t>(e)]);
          const T* src = a.row(by_row.cols[static_cast<std::size_t>(e)]);
          for (std::int64_t c = 0; c < out.cols; ++c) dst[c] += v * src[c];
        }
      }
    });
  } else if (side == Side::left) {  // out[j, :] = Σ_k v · A[r, :]; threads split the rows
    detail::parallel_for(n, 16, [&](std::int64_t j0, std::int64_t j1) {
      for (std::int64_t j = j0; j < j1; ++j) {
        T* dst = out.row(j);
        std::fill(dst, dst + out.cols, T(0));
        for (std::int64_t k = 0; k < nnz; ++k) {
          const T v = value(j, k);
          const T* src = a.row(row_of(j, k));
          for (std::int64_t c = 0; c < out.cols; ++c) dst[c] += v * src[c];
        }
      }
    });
  } else {  // right: one output row per input row
    detail::parallel_for(a.rows, std::max<std::int64_t>(1, 8192 / std::max<std::int64_t>(n * nnz, 1)),
                         [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) {
        const T* src = a.row(i);
        T* dst = out.row(i);
        if (!transpose) {  // (A·S)[i, j] = Σ_k v · A[i, r]
          for (std::int64_t j = 0; j < n; ++j) {
            T acc = T(0);
            for (std::int64_t k = 0; k < nnz; ++k) acc += value(j, k) * src[row_of(j, k)];
            dst[j] = acc;
          }
        } else {  // (A·Sᵀ)[i, r] += v · A[i, j]
          std::fill(dst, dst + out.cols, T(0));
          for (std::int64_t j = 0; j < n; ++j) {
            for (std::int64_t k = 0; k < nnz; ++k) dst[row_of(j, k)] += value(j, k) * src[j];
          }
        }
      }
    });
  }
}

/// SRHT: S = scale · R·H·D (first n columns), H the ±1 Walsh–Hadamard matrix of order n'.
template <class T>
void apply_srht(const SketchOperator& op, Side side, bool transpose, const Mat<T>& a, const Mat<T>& out) {
  const detail::SrhtStructure s = detail::srht_structure(op);
  const std::int64_t m = op.rows, n = op.cols, np = s.padded;
  const T scale = static_cast<T>(detail::entry_scale(op));
  auto sign = [&](std::int64_t j) { return static_cast<T>(s.signs[static_cast<std::size_t>(j)]); };
  auto sampled = [&](std::int64_t t) { return std::int64_t(s.rows[static_cast<std::size_t>(t)]); };
  if (side == Side::left) {  // transform the columns of A, a chunk of columns at a time
    const std::int64_t p = a.cols, chunk = std::clamp<std::int64_t>((std::int64_t{1} << 18) / np, 1, p);
    detail::parallel_for((p + chunk - 1) / chunk, 1, [&](std::int64_t b, std::int64_t e) {
      detail::Scratch<T> buffer(np * chunk);
      T* w = buffer.data();
      for (std::int64_t blk = b; blk < e; ++blk) {
        const std::int64_t c0 = blk * chunk, width = std::min(chunk, p - c0);
        std::fill(w, w + np * width, T(0));
        if (!transpose) {  // w = D·A (zero-padded to n' rows)
          for (std::int64_t r = 0; r < n; ++r) {
            for (std::int64_t c = 0; c < width; ++c) w[r * width + c] = sign(r) * a.row(r)[c0 + c];
          }
        } else {  // w = Rᵀ·A: row t of A goes to row R[t]
          for (std::int64_t t = 0; t < m; ++t) {
            for (std::int64_t c = 0; c < width; ++c) w[sampled(t) * width + c] = a.row(t)[c0 + c];
          }
        }
        detail::fwht_rows(w, np, width);
        if (!transpose) {  // out = scale · R·w
          for (std::int64_t t = 0; t < m; ++t) {
            for (std::int64_t c = 0; c < width; ++c) out.row(t)[c0 + c] = scale * w[sampled(t) * width + c];
          }
        } else {  // out = scale · D·w, first n rows
          for (std::int64_t j = 0; j < n; ++j) {
            for (std::int64_t c = 0; c < width; ++c) out.row(j)[c0 + c] = scale * sign(j) * w[j * width + c];
          }
        }
      }
    });
    return;
  }
  detail::parallel_for(a.rows, std::max<std::int64_t>(1, 65536 / np), [&](std::int64_t i0, std::int64_t i1) {
    detail::Scratch<T> buffer(np);
    T* w = buffer.data();
    for (std::int64_t i = i0; i < i1; ++i) {
      std::fill(w, w + np, T(0));
      if (!transpose) {  // (A·S)[i, :] = scale · D·H·(Rᵀ·A[i, :])
        for (std::int64_t t = 0; t < m; ++t) w[sampled(t)] = a.row(i)[t];
      } else {  // (A·Sᵀ)[i, :] = scale · R·H·D·A[i, :]
        for (std::int64_t j = 0; j < n; ++j) w[j] = sign(j) * a.row(i)[j];
      }
      detail::fwht_rows(w, np, 1);
      if (!transpose) {
        for (std::int64_t j = 0; j < n; ++j) out.row(i)[j] = scale * sign(j) * w[j];
      } else {
        for (std::int64_t t = 0; t < m; ++t) out.row(i)[t] = scale * w[sampled(t)];
      }
    }
  });
}

/// 2-D views of one batch element: the last two dimensions of `v` at `offset` elements.
TensorView matrix_at(const TensorView& v, std::int64_t offset) {
  const std::size_t esize = dtype_size(v.dtype());
  return TensorView(static_cast<char*>(v.data()) + offset * static_cast<std::int64_t>(esize), v.dtype(),
                    {v.size(-2), v.size(-1)}, {v.stride(-2), v.stride(-1)}, v.device());
}

/// Element offsets of every batch element (all dimensions but the last two).
std::vector<std::int64_t> batch_offsets(const TensorView& v) {
  std::vector<std::int64_t> offsets{0};
  for (int d = 0; d + 2 < v.ndim(); ++d) {
    std::vector<std::int64_t> next;
    next.reserve(offsets.size() * static_cast<std::size_t>(v.size(d)));
    for (std::int64_t o : offsets) {
      for (std::int64_t i = 0; i < v.size(d); ++i) next.push_back(o + i * v.stride(d));
    }
    offsets.swap(next);
  }
  return offsets;
}

/// A 1-D operand as a 2-D view: (len, 1) when it is the left operand's column, (1, len)
/// when it is a row.
TensorView as_matrix(const TensorView& v, bool column) {
  if (v.ndim() != 1) return v;
  if (column) return TensorView(v.data(), v.dtype(), {v.size(0), 1}, {v.stride(0), 1}, v.device());
  return TensorView(v.data(), v.dtype(), {1, v.size(0)}, {1, v.stride(0)}, v.device());
}

template <class T>
void apply_batch(const SketchOperator& op, const TensorView& a, const TensorView& out, Side side, bool transpose) {
  const auto a_offsets = batch_offsets(a), out_offsets = batch_offsets(out);
  for (std::size_t b = 0; b < a_offsets.size(); ++b) {
    detail::Scratch<T> a_scratch, out_scratch;
    const TensorView ab = matrix_at(a, a_offsets[b]), ob = matrix_at(out, out_offsets[b]);
    bool staged = false;
    const Mat<T> om = writable<T>(ob, out_scratch, staged);
    if (is_dense_kind(op.kind)) {  // BLAS reads either layout: pack only when it has neither
      const detail::RowMatrix rm = detail::as_row_matrix(ab);
      auto operand = detail::blas_operand<T>(ab, rm);
      if (!operand) {
        const Mat<T> packed = readable<T>(ab, a_scratch);
        operand = detail::BlasMatrix<T>{packed.data, false, packed.ld};
      }
      apply_dense<T>(op, side, transpose, *operand, ab.size(0), ab.size(1), om);
    } else {
      const Mat<T> am = readable<T>(ab, a_scratch);
      if (is_sparse_kind(op.kind)) {
        apply_sparse<T>(op, side, transpose, am, om);
      } else {
        apply_srht<T>(op, side, transpose, am, om);
      }
    }
    if (staged) detail::scatter_rows<T>(om.data, om.ld, ob, 0, om.rows);
  }
}

}  // namespace

const char* sketch_kind_name(SketchKind kind) noexcept {
  switch (kind) {
    case SketchKind::gaussian: return "gaussian";
    case SketchKind::rademacher: return "rademacher";
    case SketchKind::uniform: return "uniform";
    case SketchKind::sparse_sign: return "sparse_sign";
    case SketchKind::countsketch: return "countsketch";
    case SketchKind::srht: return "srht";
  }
  return "unknown";
}

SketchKind parse_sketch_kind(std::string_view name) {
  return detail::parse_named(name, kKinds, &sketch_kind_name, "sketch", "kind");
}

void validate_sketch(const SketchOperator& op) {
  const char* kOp = "sketch";
  if (op.rows < 1 || op.rows > kMaxExtent) {
    detail::fail<std::invalid_argument>(kOp, "m", "an integer in [1, 2^31)", std::to_string(op.rows));
  }
  if (op.cols < 1 || op.cols > kMaxExtent) {
    detail::fail<std::invalid_argument>(kOp, "n", "an integer in [1, 2^31)", std::to_string(op.cols));
  }
  if (op.kind == SketchKind::sparse_sign && (op.nnz < 1 || op.nnz > op.rows)) {
    detail::fail<std::invalid_argument>(kOp, "nnz", "an integer in [1, m = " + std::to_string(op.rows) + "]",
                                        std::to_string(op.nnz));
  }
  if (op.kind == SketchKind::srht) {
    std::int64_t padded = 1;
    while (padded < op.cols) padded *= 2;
    if (padded > kMaxExtent) {
      detail::fail<std::invalid_argument>(kOp, "n", "at most 2^30 for srht", std::to_string(op.cols));
    }
    if (op.rows > padded) {
      detail::fail<std::invalid_argument>(kOp, "m",
                                          "at most n rounded up to a power of two (" + std::to_string(padded) + ") for srht",
                                          std::to_string(op.rows));
    }
  }
}

void sketch_to_dense(const SketchOperator& op, const TensorView& out, std::int64_t row0, std::int64_t col0) {
  const char* kOp = "sketch.to_dense";
  validate_sketch(op);
  check_array(out, kOp, "out");
  if (out.ndim() != 2) detail::fail<shape_error>(kOp, "out", "a 2-D array", detail::describe_shape(out));
  const std::int64_t rows = out.size(0), cols = out.size(1);
  if (row0 < 0 || col0 < 0 || row0 + rows > op.rows || col0 + cols > op.cols) {
    detail::fail<shape_error>(kOp, "out", "a block inside the (" + std::to_string(op.rows) + ", " +
                                              std::to_string(op.cols) + ") operator",
                              "rows [" + std::to_string(row0) + ", " + std::to_string(row0 + rows) + ") × columns [" +
                                  std::to_string(col0) + ", " + std::to_string(col0 + cols) + ")");
  }
  if (!detail::has_unique_elements(out)) {
    detail::fail<std::invalid_argument>(kOp, "out", "an array whose elements do not share memory",
                                        "strides " + shape_to_string(out.strides()));
  }
  if (on_cuda(out)) {
    detail::cuda_sketch_to_dense(op, out, row0, col0);
    return;
  }
  auto fill = [&](auto* base) {
    using T = std::remove_pointer_t<decltype(base)>;
    const std::int64_t rs = out.stride(0), cs = out.stride(1);
    const double scale = detail::entry_scale(op);
    if (is_dense_kind(op.kind)) {
      dense_block_into(op, row0, row0 + rows, col0, col0 + cols, scale, base, rs, cs);
      return;
    }
    for (std::int64_t i = 0; i < rows; ++i) {
      for (std::int64_t c = 0; c < cols; ++c) base[i * rs + c * cs] = T(0);
    }
    if (is_sparse_kind(op.kind)) {  // the block's columns, as the CUDA backend builds them
      const std::int64_t nnz = sparse_nnz(op);
      const detail::SparseStructure s = detail::sparse_structure(op, col0, cols);
      for (std::int64_t e = 0; e < cols * nnz; ++e) {
        const std::int64_t i = s.rows[static_cast<std::size_t>(e)] - row0;
        if (i >= 0 && i < rows) base[i * rs + (e / nnz) * cs] = static_cast<T>(scale * s.signs[static_cast<std::size_t>(e)]);
      }
    } else {
      const detail::SrhtStructure s = detail::srht_structure(op);
      detail::parallel_for(rows, 16, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) {
          const auto sampled = static_cast<std::uint32_t>(s.rows[static_cast<std::size_t>(row0 + i)]);
          for (std::int64_t c = 0; c < cols; ++c) {
            const auto j = static_cast<std::uint32_t>(col0 + c);
            const int parity = __builtin_popcount(sampled & j) & 1;
            const double v = scale * s.signs[j] * (parity ? -1.0 : 1.0);
            base[i * rs + c * cs] = static_cast<T>(v);
          }
        }
      });
    }
  };
  if (out.dtype() == DType::float64) {
    fill(static_cast<double*>(out.data()));
  } else {
    fill(static_cast<float*>(out.data()));
  }
}

std::vector<std::int64_t> sketch_apply_output_shape(const SketchOperator& op, const TensorView& a, Side side,
                                                    bool transpose) {
  const char* kOp = "sketch.apply";
  validate_sketch(op);
  check_array(a, kOp, "a");
  const std::int64_t m = transpose ? op.cols : op.rows, n = transpose ? op.rows : op.cols;
  if (a.ndim() < 1) detail::fail<shape_error>(kOp, "a", "an array with at least 1 dimension", detail::describe_shape(a));
  std::vector<std::int64_t> shape = a.shape();
  if (side == Side::left) {
    const int dim = a.ndim() == 1 ? 0 : a.ndim() - 2;
    if (a.size(dim) != n) {
      detail::fail<shape_error>(kOp, "a", "shape (..., " + std::to_string(n) + ", p) for a left application of a (" +
                                              std::to_string(m) + ", " + std::to_string(n) + ") operator",
                                detail::describe_shape(a));
    }
    shape[static_cast<std::size_t>(dim)] = m;
  } else {
    if (a.size(-1) != m) {
      detail::fail<shape_error>(kOp, "a", "shape (..., p, " + std::to_string(m) + ") for a right application of a (" +
                                              std::to_string(m) + ", " + std::to_string(n) + ") operator",
                                detail::describe_shape(a));
    }
    shape.back() = n;
  }
  return shape;
}

void sketch_apply(const SketchOperator& op, const TensorView& a, const TensorView& out, Side side, bool transpose) {
  const char* kOp = "sketch.apply";
  const auto expected = sketch_apply_output_shape(op, a, side, transpose);
  check_array(out, kOp, "out", &a);
  if (out.shape() != expected) {
    detail::fail<shape_error>(kOp, "out", "shape " + shape_to_string(expected), detail::describe_shape(out));
  }
  if (!detail::has_unique_elements(out)) {
    detail::fail<std::invalid_argument>(kOp, "out", "an array whose elements do not share memory",
                                        "strides " + shape_to_string(out.strides()));
  }
  if (detail::overlaps(out, a)) {
    detail::fail<std::invalid_argument>(kOp, "out", "memory disjoint from a", "an array overlapping a");
  }
  if (a.numel() == 0 || out.numel() == 0) return;
  const bool column = side == Side::left;
  const TensorView av = as_matrix(a, column), ov = as_matrix(out, column);
  if (on_cuda(a)) {
    std::vector<TensorView> a_matrices, out_matrices;
    const auto a_offsets = batch_offsets(av), out_offsets = batch_offsets(ov);
    for (std::size_t b = 0; b < a_offsets.size(); ++b) {
      a_matrices.push_back(matrix_at(av, a_offsets[b]));
      out_matrices.push_back(matrix_at(ov, out_offsets[b]));
    }
    detail::cuda_sketch_apply(op, a_matrices, out_matrices, side, transpose);
    return;
  }
  if (a.dtype() == DType::float64) {
    apply_batch<double>(op, av, ov, side, transpose);
  } else {
    apply_batch<float>(op, av, ov, side, transpose);
  }
}

}  // namespace sketchcore
