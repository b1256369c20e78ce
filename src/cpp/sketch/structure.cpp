#include "sketch/structure.hpp"

#include <algorithm>
#include <cmath>

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

}  // namespace

void sparse_column(const SketchOperator& op, std::int64_t j, std::int32_t* rows, std::int8_t* signs,
                   std::vector<std::uint8_t>& seen) {
  WordStream words(op.seed, static_cast<std::uint32_t>(j), kSparseStream);
  const std::int64_t nnz = op.kind == SketchKind::countsketch ? 1 : op.nnz;
  floyd_sample(words, op.rows, nnz, rows, seen);
  for (std::int64_t k = 0; k < nnz; ++k) signs[k] = (words.next() >> 31) ? std::int8_t(-1) : std::int8_t(1);
}

SparseStructure sparse_structure(const SketchOperator& op) {
  const std::int64_t nnz = op.kind == SketchKind::countsketch ? 1 : op.nnz;
  SparseStructure s;
  s.rows.allocate(op.cols * nnz);
  s.signs.allocate(op.cols * nnz);
  parallel_for(op.cols, std::max<std::int64_t>(1, 4096 / nnz), [&](std::int64_t begin, std::int64_t end) {
    std::vector<std::uint8_t> seen;
    for (std::int64_t j = begin; j < end; ++j) {
      sparse_column(op, j, s.rows.data() + j * nnz, s.signs.data() + j * nnz, seen);
    }
  });
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
