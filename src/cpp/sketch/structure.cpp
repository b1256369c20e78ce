#include "sketch/structure.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "detail/parallel.hpp"
#include "sketch/entries.hpp"

namespace sketchcore::detail {

namespace {

/// Floyd's algorithm: `count` distinct values of [0, range), ascending, drawn from `words`.
/// `seen` is a scratch bitmap of `range` bytes used when count is large.
void floyd_sample(WordStream& words, std::int64_t range, std::int64_t count, std::int32_t* out,
                  std::vector<std::uint8_t>& seen) {
  const bool use_bitmap = count > 32;
  if (use_bitmap) seen.assign(static_cast<std::size_t>(range), 0);
  std::int64_t taken = 0;
  for (std::int64_t k = range - count; k < range; ++k) {
    auto candidate = static_cast<std::int32_t>(words.below(static_cast<std::uint64_t>(k) + 1));
    bool present;
    if (use_bitmap) {
      present = seen[static_cast<std::size_t>(candidate)] != 0;
    } else {
      present = std::find(out, out + taken, candidate) != out + taken;
    }
    if (present) candidate = static_cast<std::int32_t>(k);
    if (use_bitmap) seen[static_cast<std::size_t>(candidate)] = 1;
    out[taken++] = candidate;
  }
  std::sort(out, out + count);
}

/// Rows (ascending) and signs (+1/−1) of the nnz nonzeros of sparse column j.
void sparse_column(const SketchOperator& op, std::int64_t j, std::int32_t* rows, std::int8_t* signs,
                   std::vector<std::uint8_t>& seen) {
  WordStream words(op.seed, static_cast<std::uint32_t>(j), kSparseStream);
  const std::int64_t nnz = sparse_nnz(op);
  floyd_sample(words, op.rows, nnz, rows, seen);
  for (std::int64_t k = 0; k < nnz; ++k) signs[k] = (words.next() >> 31) ? std::int8_t(-1) : std::int8_t(1);
}

}  // namespace

SparseStructure sparse_structure(const SketchOperator& op, std::int64_t col0, std::int64_t count) {
  const std::int64_t nnz = sparse_nnz(op);
  if (count < 0) count = op.cols - col0;
  SparseStructure s;
  s.rows.allocate(count * nnz);
  s.signs.allocate(count * nnz);
  parallel_for(count, std::max<std::int64_t>(1, 4096 / nnz), [&](std::int64_t begin, std::int64_t end) {
    std::vector<std::uint8_t> seen;
    for (std::int64_t c = begin; c < end; ++c) {
      sparse_column(op, col0 + c, s.rows.data() + c * nnz, s.signs.data() + c * nnz, seen);
    }
  });
  return s;
}

SparseByRow sparse_by_row(const SketchOperator& op, const SparseStructure& by_column) {
  const std::int64_t nnz = sparse_nnz(op), total = op.cols * nnz;
  SparseByRow s;
  s.offsets.allocate(op.rows + 1);
  s.cols.allocate(total);
  s.signs.allocate(total);
  std::int64_t* offsets = s.offsets.data();
  std::fill(offsets, offsets + op.rows + 1, std::int64_t{0});
  for (std::int64_t e = 0; e < total; ++e) ++offsets[by_column.rows.data()[e] + 1];
  for (std::int64_t r = 0; r < op.rows; ++r) offsets[r + 1] += offsets[r];
  // Counting sort, stable in the column: each row's columns come out ascending.
  Scratch<std::int64_t> next(op.rows);
  std::copy(offsets, offsets + op.rows, next.data());
  for (std::int64_t j = 0; j < op.cols; ++j) {
    for (std::int64_t k = 0; k < nnz; ++k) {
      const std::int64_t e = j * nnz + k, slot = next.data()[by_column.rows.data()[e]]++;
      s.cols.data()[slot] = static_cast<std::int32_t>(j);
      s.signs.data()[slot] = by_column.signs.data()[e];
    }
  }
  return s;
}

SrhtStructure srht_structure(const SketchOperator& op) {
  SrhtStructure s;
  while (s.padded < op.cols) s.padded *= 2;
  s.signs.allocate(s.padded);
  for (std::int64_t j = 0; j < s.padded; j += 4) {
    const Philox4x32 w = sketch_block(op.seed, static_cast<std::uint32_t>(j >> 2), 0u, kSrhtSignStream);
    for (int l = 0; l < 4 && j + l < s.padded; ++l) {
      s.signs[static_cast<std::size_t>(j + l)] = (w.v[l] >> 31) ? std::int8_t(-1) : std::int8_t(1);
    }
  }
  s.rows.allocate(op.rows);
  WordStream words(op.seed, 0u, kSrhtRowStream);
  std::vector<std::uint8_t> seen;
  floyd_sample(words, s.padded, op.rows, s.rows.data(), seen);
  return s;
}

double entry_scale(const SketchOperator& op) noexcept {
  if (!op.scaled) return 1.0;
  switch (op.kind) {
    case SketchKind::sparse_sign: return 1.0 / std::sqrt(static_cast<double>(op.nnz));
    case SketchKind::countsketch: return 1.0;
    default: return 1.0 / std::sqrt(static_cast<double>(op.rows));
  }
}

}  // namespace sketchcore::detail
