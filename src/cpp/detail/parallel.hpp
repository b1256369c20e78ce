// A fork-join loop over an index range on persistent worker threads (cpu/workers.cpp),
// for sketchcore's own element-wise work. BLAS is never called from inside a region, so
// BLAS's threads and these never run at the same time (no oversubscription).
#pragma once

#include <cstdint>
#include <functional>

namespace sketchcore::detail {

/// Calls body(begin, end) on disjoint chunks covering [0, n), using up to
/// get_num_threads() threads but never chunks smaller than `grain` items; the calling
/// thread runs the first chunk. The first exception thrown by a chunk is rethrown.
void parallel_for(std::int64_t n, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& body);

/// Thread count used by parallel_for (the value set by set_num_threads).
int current_num_threads() noexcept;

}  // namespace sketchcore::detail
