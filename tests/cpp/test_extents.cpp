// Overflowing extents: stride-0 views describe huge arrays in a few bytes, so every size the
// core derives from them must be checked before anything is allocated or written.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include "sketchcore/sketchcore.hpp"

using sketchcore::DType;
using sketchcore::TensorView;

namespace {

float cell[64];  // every view below is stride 0 or tiny: it never reads past this

/// A stride-0 view of `shape`: any extent, one element of memory.
TensorView broadcast(std::vector<std::int64_t> shape) {
  return TensorView(cell, DType::float32, shape, std::vector<std::int64_t>(shape.size(), 0));
}

std::string message_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const sketchcore::shape_error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong type: ") + e.what();
  }
  return "no exception";
}

constexpr std::int64_t k2_30 = std::int64_t{1} << 30, k2_31 = std::int64_t{1} << 31;

TEST(Extents, ViewWhoseElementCountOverflowsIsRefused) {
  const std::string m = message_of([] { broadcast({k2_31 * 2, 4, k2_31 * 2}); });
  EXPECT_NE(m.find("TensorView: shape"), std::string::npos) << m;
  EXPECT_NE(m.find("fits in a signed 64-bit integer"), std::string::npos) << m;
}

TEST(Extents, EmptyViewWithHugeOtherExtentsIsAccepted) {
  const TensorView v = broadcast({0, k2_31 * 4, k2_31 * 4});
  EXPECT_EQ(v.numel(), 0);
}

TEST(Extents, ViewWhoseByteSpanOverflowsIsRefused) {
  const std::int64_t big = std::numeric_limits<std::int64_t>::max() / 2;
  const std::string m = message_of([&] { TensorView(cell, DType::float32, {3}, {big}); });
  EXPECT_NE(m.find("TensorView: strides"), std::string::npos) << m;
  const std::string m2 = message_of([] {
    TensorView(cell, DType::float32, {2}, {std::numeric_limits<std::int64_t>::min()});
  });
  EXPECT_NE(m2.find("TensorView: strides"), std::string::npos) << m2;
}

/// The audit's reproducers: each once crashed (SIGSEGV, SIGFPE) or hung.
TEST(Extents, SketchedMatmulRefusesOperandsBeyondTheAddressSpace) {
  float y[8];
  const struct {
    std::vector<std::int64_t> x, S, U;
  } cases[] = {
      {{1, 4}, {k2_30, 4, k2_30}, {k2_30, k2_30, 1}},
      {{1, 2}, {k2_30, 2, k2_30 + 1}, {k2_30, k2_30 + 1, 1}},
      {{1, 1}, {k2_31, 1, k2_31}, {k2_31, k2_31, 1}},
  };
  for (const auto& c : cases) {
    const std::string m = message_of([&] {
      sketchcore::sketched_matmul(broadcast(c.x), broadcast(c.S), broadcast(c.U),
                                  TensorView(y, DType::float32, {1, 1}));
    });
    EXPECT_NE(m.find("sketched_matmul: S: expected at most 2**63 - 1 bytes"), std::string::npos) << m;
  }
}

TEST(Extents, DerivedSizesAreChecked) {
  float y[8];
  // T·k overflows although S holds no element (d_in = 0).
  std::string m = message_of([&] {
    sketchcore::sketched_matmul(broadcast({1, 0}), broadcast({k2_31 * 4, 0, k2_31 * 4}),
                                broadcast({k2_31 * 4, k2_31 * 4, 0}), TensorView(y, DType::float32, {1, 0}));
  });
  EXPECT_NE(m.find("sketched_matmul: S: "), std::string::npos) << m;
  EXPECT_NE(m.find("T·k columns"), std::string::npos) << m;
  EXPECT_NE(m.find("2**63 - 1 bytes"), std::string::npos) << m;
  // The rows × d_out output overflows.
  m = message_of([&] {
    sketchcore::sketched_matmul(broadcast({k2_31 * 512, 1}), broadcast({1, 8}), broadcast({8, k2_31 * 512}),
                                TensorView(y, DType::float32, {1, 1}));  // checked after the operands
  });
  EXPECT_NE(m.find("2**63 - 1 bytes"), std::string::npos) << m;
  // The rows × T·k intermediate overflows.
  m = message_of([&] {
    sketchcore::sketched_matmul(broadcast({k2_31 * 512, 1}), broadcast({1, k2_31 * 512}),
                                broadcast({k2_31 * 512, 1}), broadcast({k2_31 * 512, 1}));
  });
  EXPECT_NE(m.find("S: expected at most 2**63 - 1 bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("intermediate"), std::string::npos) << m;
}

TEST(Extents, HugeButAddressableTemporaryIsAMemoryErrorWithNothingLeaked) {
  auto& pool = sketchcore::default_host_pool();
  pool.set_limit(std::size_t{1} << 30);
  const auto before = pool.stats().current_bytes;
  float y[1];
  EXPECT_THROW(sketchcore::sketched_matmul(broadcast({1, 1}), broadcast({std::int64_t{1} << 20, 1, std::int64_t{1} << 20}),
                                           broadcast({std::int64_t{1} << 20, std::int64_t{1} << 20, 1}),
                                           TensorView(y, DType::float32, {1, 1})),
               std::bad_alloc);
  EXPECT_EQ(pool.stats().current_bytes, before);
  pool.set_limit(std::nullopt);
}

TEST(Extents, PoolRefusesRequestsBeyondItsLargestClassWithoutLooping) {
  sketchcore::CachingHostPool pool;
  const std::size_t huge = std::numeric_limits<std::size_t>::max() - 3;
  EXPECT_EQ(sketchcore::CachingHostPool::size_class(huge), huge);
  EXPECT_GE(sketchcore::CachingHostPool::size_class(std::size_t{1} << 62), std::size_t{1} << 62);
  EXPECT_THROW(pool.allocate(huge), sketchcore::out_of_memory);
  EXPECT_THROW(pool.allocate((std::size_t{1} << 62) + 1), sketchcore::out_of_memory);
  EXPECT_EQ(pool.stats().current_bytes, 0u);
  EXPECT_EQ(pool.stats().reserved_bytes, 0u);
}

TEST(Extents, SketchApplyRefusesUnaddressableArrays) {
  const sketchcore::SketchOperator op{sketchcore::SketchKind::gaussian, 4, 8, 1, 1, true};
  const std::string m = message_of([&] {
    sketchcore::sketch_apply(op, broadcast({k2_30 / 2, 8, k2_30}), TensorView(cell, DType::float32, {1, 1}),
                             sketchcore::Side::left, false);
  });
  EXPECT_NE(m.find("sketch.apply: a: expected at most 2**63 - 1 bytes"), std::string::npos) << m;
}

}  // namespace
