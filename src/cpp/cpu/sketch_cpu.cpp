// The CPU backend's sketch kernels: dense operators generated tile by tile into pooled
// memory and applied with BLAS, sparse ones as loops over their nonzeros, SRHT by fast
// Walsh–Hadamard transforms. Called through Backend after the core's validation
// (sketch/sketch_ops.cpp).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <type_traits>

#include "cpu/cpu_ops.hpp"
#include "detail/blas.hpp"
#include "detail/layout.hpp"
#include "detail/parallel.hpp"
#include "detail/scratch.hpp"
#include "detail/strided.hpp"
#include "sketch/entries.hpp"
#include "sketch/fwht.hpp"
#include "sketch/structure.hpp"

namespace sketchcore::detail {

namespace {

/// Budget of a generated tile of a dense operator.
constexpr std::int64_t kTileBytes = std::int64_t{4} << 20;

// ------------------------------------------------------------------- dense generation

/// Writes S[i0 : i1, j0 : j1] (times `scale`) to dst[(i − i0)·rs + (j − j0)·cs], sweeping
/// each group of four rows (one Philox block per column) along the columns, so that a
/// row-major destination is written as four sequential streams. Parallel over groups.
template <class T>
void dense_block_into(const SketchOperator& op, std::int64_t i0, std::int64_t i1, std::int64_t j0, std::int64_t j1,
                      double scale, T* dst, std::int64_t rs, std::int64_t cs) {
  const std::int64_t first_group = i0 >> 2, groups = ((i1 + 3) >> 2) - first_group;
  const std::int64_t grain = std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(j1 - j0, 1));
  parallel_for(groups, grain, [&](std::int64_t g0, std::int64_t g1) {
    double values[4];
    for (std::int64_t g = first_group + g0; g < first_group + g1; ++g) {
      const std::int64_t lo = std::max(i0, g * 4), hi = std::min(i1, g * 4 + 4);
      for (std::int64_t j = j0; j < j1; ++j) {
        dense_block_values(op.kind, dense_block(op.kind, op.seed, lo, j), values);
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

/// A row-major (non-transposed) MatrixOperand that may be written, with its extents: the
/// form the sparse and SRHT loops address row by row.
template <class T>
struct Mat {
  T* data;
  std::int64_t rows, cols, ld;
  T* row(std::int64_t i) const { return data + i * ld; }
};

/// `v` (2-D) in place when the layout analysis finds it row-major, else nullopt.
template <class T>
std::optional<Mat<T>> row_major(const TensorView& v) {
  const std::int64_t r = v.size(0), c = v.size(1);
  const auto op = operand_in_place(static_cast<const T*>(v.data()), r, c, v.stride(0), v.stride(1));
  if (!op || op->transposed) return std::nullopt;
  return Mat<T>{static_cast<T*>(v.data()), r, c, op->ld};
}

/// `v` (2-D) as a row-major matrix, packed into `scratch` unless already row-major.
template <class T>
Mat<T> readable(const TensorView& v, Scratch<T>& scratch) {
  if (const auto m = row_major<T>(v)) return *m;
  const std::int64_t r = v.size(0), c = v.size(1);
  pack_rows<T>(v, scratch.allocate(r * c));
  return {scratch.data(), r, c, std::max<std::int64_t>(c, 1)};
}

/// Where to write `v` (2-D): itself if row-major, else `scratch` (`staged`: copy it back).
template <class T>
Mat<T> writable(const TensorView& v, Scratch<T>& scratch, bool& staged) {
  const auto m = row_major<T>(v);
  staged = !m;
  if (m) return *m;
  const std::int64_t r = v.size(0), c = v.size(1);
  return {scratch.allocate(r * c), r, c, std::max<std::int64_t>(c, 1)};
}

// ------------------------------------------------------------------------- applying
//
// Four products, each computed directly (never through a transposed copy of an operand):
//   left  S·A  (A: n × p → m × p)      right  A·S  (A: q × m → q × n)
//   left  Sᵀ·A (A: m × p → n × p)      right  A·Sᵀ (A: q × n → q × m)

/// Dense kinds: S generated in column tiles of `width` into pooled memory, then BLAS.
template <class T>
void apply_dense(const SketchOperator& op, Side side, bool transpose, const MatrixOperand<T>& a,
                 std::int64_t a_rows, std::int64_t a_cols, const Mat<T>& out) {
  const std::int64_t m = op.rows, n = op.cols;
  const T scale = static_cast<T>(entry_scale(op));
  const std::int64_t width = std::min(n, std::max<std::int64_t>(64, kTileBytes / (m * std::int64_t(sizeof(T)))));
  Scratch<T> tile_buffer(m * width);
  T* tile = tile_buffer.data();
  for (std::int64_t j0 = 0; j0 < n; j0 += width) {
    const std::int64_t w = std::min(width, n - j0);
    dense_tile<T>(op, j0, w, 1.0, tile);  // S[:, j0 : j0 + w], m × w
    const MatrixOperand<T> t{tile, false, w}, t_transposed{tile, true, w};
    const T beta = j0 == 0 ? T(0) : T(1);
    if (side == Side::left && !transpose) {  // out += S[:, J] · A[J, :]
      gemm<T>(m, a_cols, w, scale, t, rows_from<T>(a, j0), out.data, out.ld, beta);
    } else if (side == Side::right && !transpose) {  // out[:, J] = A · S[:, J]
      gemm<T>(a_rows, w, m, scale, a, t, out.data + j0, out.ld);
    } else if (side == Side::left) {  // out[J, :] = S[:, J]ᵀ · A
      gemm<T>(w, a_cols, m, scale, t_transposed, a, out.row(j0), out.ld);
    } else {  // out += A[:, J] · S[:, J]ᵀ
      gemm<T>(a_rows, m, w, scale, cols_from<T>(a, j0), t_transposed, out.data, out.ld, beta);
    }
  }
}

/// Sparse kinds: loops over the nnz nonzeros of each column of S.
template <class T>
void apply_sparse(const SketchOperator& op, Side side, bool transpose, const Mat<T>& a, const Mat<T>& out) {
  const SparseStructure s = sparse_structure(op);
  const std::int64_t n = op.cols, nnz = sparse_nnz(op);
  const double scale = entry_scale(op);
  auto value = [&](std::int64_t j, std::int64_t k) { return static_cast<T>(scale * s.signs[static_cast<std::size_t>(j * nnz + k)]); };
  auto row_of = [&](std::int64_t j, std::int64_t k) { return std::int64_t(s.rows[static_cast<std::size_t>(j * nnz + k)]); };
  if (side == Side::left && !transpose) {  // out[r, :] = Σ v · A[j, :] over row r's nonzeros (as on CUDA)
    const SparseByRow by_row = sparse_by_row(op, s);
    parallel_for(out.rows, 16, [&](std::int64_t r0, std::int64_t r1) {
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
    parallel_for(n, 16, [&](std::int64_t j0, std::int64_t j1) {
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
  } else {  // right: blocks of kRows rows, transposed so that each nonzero is one contiguous axpy
    // Per output element the terms are added in the same order as one row at a time would
    // (j, then k, ascending): the bits do not depend on the block size or the thread count.
    constexpr std::int64_t kRows = 64;
    const std::int64_t blocks = (a.rows + kRows - 1) / kRows;
    parallel_for(blocks, 1, [&](std::int64_t b0, std::int64_t b1) {
      Scratch<T> a_block(a.cols * kRows), out_block(out.cols * kRows);
      T* at = a_block.data();    // at[c·w + i] = A[i0 + i, c]
      T* ot = out_block.data();  // ot[c·w + i] → out[i0 + i, c]
      for (std::int64_t blk = b0; blk < b1; ++blk) {
        const std::int64_t i0 = blk * kRows, w = std::min(kRows, a.rows - i0);
        for (std::int64_t c0 = 0; c0 < a.cols; c0 += kRows) {  // square tiles: both sides stay in L1
          const std::int64_t c1 = std::min(a.cols, c0 + kRows);
          for (std::int64_t i = 0; i < w; ++i) {
            const T* src = a.row(i0 + i);
            for (std::int64_t c = c0; c < c1; ++c) at[c * w + i] = src[c];
          }
        }
        std::fill(ot, ot + out.cols * w, T(0));
        for (std::int64_t j = 0; j < n; ++j) {
          for (std::int64_t k = 0; k < nnz; ++k) {
            const T v = value(j, k);
            if (!transpose) {  // (A·S)[i, j] += v · A[i, r]
              const T* col = at + row_of(j, k) * w;
              T* dst = ot + j * w;
              for (std::int64_t i = 0; i < w; ++i) dst[i] += v * col[i];
            } else {  // (A·Sᵀ)[i, r] += v · A[i, j]
              const T* col = at + j * w;
              T* dst = ot + row_of(j, k) * w;
              for (std::int64_t i = 0; i < w; ++i) dst[i] += v * col[i];
            }
          }
        }
        for (std::int64_t c0 = 0; c0 < out.cols; c0 += kRows) {
          const std::int64_t c1 = std::min(out.cols, c0 + kRows);
          for (std::int64_t i = 0; i < w; ++i) {
            T* dst = out.row(i0 + i);
            for (std::int64_t c = c0; c < c1; ++c) dst[c] = ot[c * w + i];
          }
        }
      }
    });
  }
}

/// SRHT: S = scale · R·H·D (first n columns), H the ±1 Walsh–Hadamard matrix of order n'.
template <class T>
void apply_srht(const SketchOperator& op, Side side, bool transpose, const Mat<T>& a, const Mat<T>& out) {
  const SrhtStructure s = srht_structure(op);
  const std::int64_t m = op.rows, n = op.cols, np = s.padded;
  const T scale = static_cast<T>(entry_scale(op));
  auto sign = [&](std::int64_t j) { return static_cast<T>(s.signs[static_cast<std::size_t>(j)]); };
  auto sampled = [&](std::int64_t t) { return std::int64_t(s.rows[static_cast<std::size_t>(t)]); };
  if (side == Side::left) {  // transform the columns of A, a chunk of columns at a time
    const std::int64_t p = a.cols, chunk = std::clamp<std::int64_t>((std::int64_t{1} << 18) / np, 1, p);
    parallel_for((p + chunk - 1) / chunk, 1, [&](std::int64_t b, std::int64_t e) {
      Scratch<T> buffer(np * chunk);
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
        fwht_rows(w, np, width);
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
  parallel_for(a.rows, std::max<std::int64_t>(1, 65536 / np), [&](std::int64_t i0, std::int64_t i1) {
    Scratch<T> buffer(np);
    T* w = buffer.data();
    for (std::int64_t i = i0; i < i1; ++i) {
      std::fill(w, w + np, T(0));
      if (!transpose) {  // (A·S)[i, :] = scale · D·H·(Rᵀ·A[i, :])
        for (std::int64_t t = 0; t < m; ++t) w[sampled(t)] = a.row(i)[t];
      } else {  // (A·Sᵀ)[i, :] = scale · R·H·D·A[i, :]
        for (std::int64_t j = 0; j < n; ++j) w[j] = sign(j) * a.row(i)[j];
      }
      fwht_rows(w, np, 1);
      if (!transpose) {
        for (std::int64_t j = 0; j < n; ++j) out.row(i)[j] = scale * sign(j) * w[j];
      } else {
        for (std::int64_t t = 0; t < m; ++t) out.row(i)[t] = scale * w[sampled(t)];
      }
    }
  });
}

template <class T>
void apply_batch(const SketchOperator& op, const TensorView& a, const TensorView& out, Side side, bool transpose) {
  const auto a_offsets = batch_offsets(a), out_offsets = batch_offsets(out);
  for (std::size_t b = 0; b < a_offsets.size(); ++b) {
    Scratch<T> a_scratch, out_scratch;
    const TensorView ab = matrix_at(a, a_offsets[b]), ob = matrix_at(out, out_offsets[b]);
    bool staged = false;
    const Mat<T> om = writable<T>(ob, out_scratch, staged);
    if (is_dense_kind(op.kind)) {  // BLAS reads either layout: pack only when it has neither
      auto operand = operand_in_place<T>(ab);
      if (!operand) {
        const Mat<T> packed = readable<T>(ab, a_scratch);
        operand = MatrixOperand<T>{packed.data, false, packed.ld};
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
    if (staged) scatter_rows<T>(om.data, om.ld, ob, 0, om.rows);
  }
}

}  // namespace

void cpu_sketch_to_dense(const SketchOperator& op, const TensorView& out, std::int64_t row0, std::int64_t col0) {
  const std::int64_t rows = out.size(0), cols = out.size(1);
  auto fill = [&](auto* base) {
    using T = std::remove_pointer_t<decltype(base)>;
    const std::int64_t rs = out.stride(0), cs = out.stride(1);
    const double scale = entry_scale(op);
    if (is_dense_kind(op.kind)) {
      dense_block_into(op, row0, row0 + rows, col0, col0 + cols, scale, base, rs, cs);
      return;
    }
    for (std::int64_t i = 0; i < rows; ++i) {
      for (std::int64_t c = 0; c < cols; ++c) base[i * rs + c * cs] = T(0);
    }
    if (is_sparse_kind(op.kind)) {  // the block's columns, as the CUDA backend builds them
      const std::int64_t nnz = sparse_nnz(op);
      const SparseStructure s = sparse_structure(op, col0, cols);
      for (std::int64_t e = 0; e < cols * nnz; ++e) {
        const std::int64_t i = s.rows[static_cast<std::size_t>(e)] - row0;
        if (i >= 0 && i < rows) base[i * rs + (e / nnz) * cs] = static_cast<T>(scale * s.signs[static_cast<std::size_t>(e)]);
      }
    } else {
      const SrhtStructure s = srht_structure(op);
      parallel_for(rows, 16, [&](std::int64_t b, std::int64_t e) {
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

void cpu_sketch_apply(const SketchApplyProblem& p) {
  if (p.a.dtype() == DType::float64) {
    apply_batch<double>(p.op, p.a, p.out, p.side, p.transpose);
  } else {
    apply_batch<float>(p.op, p.a, p.out, p.side, p.transpose);
  }
}

}  // namespace sketchcore::detail
