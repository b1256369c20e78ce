// The random structure of the sparse and SRHT operators: which rows are nonzero in each
// sparse column (and their signs), and SRHT's signs and sampled rows.
#pragma once

#include <cstdint>
#include <vector>

#include "detail/scratch.hpp"
#include "sketchcore/sketch.hpp"

namespace sketchcore::detail {

/// Dense kinds are generated entry by entry; sparse kinds and SRHT have a structure.
inline bool is_dense_kind(SketchKind k) {
  return k == SketchKind::gaussian || k == SketchKind::rademacher || k == SketchKind::uniform;
}
inline bool is_sparse_kind(SketchKind k) { return k == SketchKind::sparse_sign || k == SketchKind::countsketch; }
/// Nonzeros per column of a sparse kind.
inline std::int64_t sparse_nnz(const SketchOperator& op) { return op.kind == SketchKind::countsketch ? 1 : op.nnz; }

/// Columns [col0, col0 + count) (all columns when count < 0): rows and signs in
/// column-major blocks of nnz (column col0 + c at c·nnz), built in parallel into pooled
/// memory.
struct SparseStructure {
  Scratch<std::int32_t> rows;
  Scratch<std::int8_t> signs;
};
SparseStructure sparse_structure(const SketchOperator& op, std::int64_t col0 = 0, std::int64_t count = -1);

/// The nonzeros of a whole sparse operator listed by row (CSR): row r's nonzeros are
/// cols/signs[offsets[r] : offsets[r + 1]], columns ascending. Lets a device sum each output
/// row in a fixed order (no atomics) where the column lists would scatter.
struct SparseByRow {
  Scratch<std::int64_t> offsets;  // rows + 1
  Scratch<std::int32_t> cols;
  Scratch<std::int8_t> signs;
};
SparseByRow sparse_by_row(const SketchOperator& op, const SparseStructure& by_column);

/// SRHT's random parts: padded length n' (a power of two ≥ cols), D's signs over n', and
/// the m sampled rows of n' in ascending order.
struct SrhtStructure {
  std::int64_t padded = 1;
  Scratch<std::int8_t> signs;
  Scratch<std::int32_t> rows;
};
SrhtStructure srht_structure(const SketchOperator& op);

/// Scale of the nonzero entries: gaussian/rademacher/uniform 1/√m, sparse 1/√nnz, srht
/// 1/√m (on the unnormalized ±1 Hadamard); 1 when unscaled.
double entry_scale(const SketchOperator& op) noexcept;

}  // namespace sketchcore::detail
