// The random structure of the sparse and SRHT operators: which rows are nonzero in each
// sparse column (and their signs), and SRHT's signs and sampled rows.
#pragma once

#include <cstdint>
#include <vector>

#include "detail/scratch.hpp"
#include "sketchcore/sketch.hpp"

namespace sketchcore::detail {

/// Rows (ascending) and signs (+1/−1) of the nnz nonzeros of sparse column j.
void sparse_column(const SketchOperator& op, std::int64_t j, std::int32_t* rows, std::int8_t* signs,
                   std::vector<std::uint8_t>& seen);

/// All columns [0, cols): rows and signs in column-major blocks of nnz, built in parallel
/// into pooled memory.
struct SparseStructure {
  Scratch<std::int32_t> rows;
  Scratch<std::int8_t> signs;
};
SparseStructure sparse_structure(const SketchOperator& op);

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
