// The stored layout of an Int8Factor (detail/quantized_storage.hpp, shared by every format), built
// on the host: what the CUDA backend uploads for cuBLASLt's int8 GEMM, and the per-device copies the
// factor keeps. White-box (the storage is read through the header only). The GEMM that reads it runs
// only on a GPU (tests/gpu/test_gpu_int8.py).
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "detail/quantized_storage.hpp"
#include "sketchcore/int8_matmul.hpp"

namespace sc = sketchcore;

namespace {

TEST(Int8DeviceLayout, ExtentsArePositiveMultiplesOf16) {
  EXPECT_EQ(sc::detail::quantized_extent(0), 16);
  EXPECT_EQ(sc::detail::quantized_extent(1), 16);
  EXPECT_EQ(sc::detail::quantized_extent(16), 16);
  EXPECT_EQ(sc::detail::quantized_extent(17), 32);
  EXPECT_EQ(sc::detail::quantized_extent(375), 384);
}

TEST(Int8DeviceLayout, ColumnsAreContiguousAndThePaddingIsZero) {
  std::mt19937 gen(49);
  std::uniform_int_distribution<int> value(-127, 127);
  std::uniform_real_distribution<float> scale_of(0.0f, 2.0f);
  for (const auto& [rows, cols] : {std::pair<int, int>{0, 3}, {3, 0}, {1, 1}, {16, 16}, {17, 5}, {33, 40}}) {
    // Transposed strides: the layout must follow the values, not the memory order.
    std::vector<std::int8_t> q(static_cast<std::size_t>(rows * cols));
    for (auto& v : q) v = static_cast<std::int8_t>(value(gen));
    std::vector<float> scale(static_cast<std::size_t>(cols));
    for (auto& s : scale) s = scale_of(gen);
    const sc::Int8Factor factor(q.data(), rows, cols, 1, rows, scale.data());  // q(i, j) at i + j·rows
    const sc::QuantizedFactor::Storage& layout = factor.storage();
    ASSERT_EQ(layout.k_pad, sc::detail::quantized_extent(rows));
    ASSERT_EQ(layout.n_pad, sc::detail::quantized_extent(cols));
    ASSERT_EQ(layout.codes.size(), static_cast<std::size_t>(layout.k_pad * layout.n_pad));
    ASSERT_EQ(layout.scales.size(), static_cast<std::size_t>(layout.n_pad));
    for (std::int64_t j = 0; j < layout.n_pad; ++j) {
      for (std::int64_t i = 0; i < layout.k_pad; ++i) {
        const std::int8_t expected = (i < rows && j < cols) ? q[static_cast<std::size_t>(i + j * rows)] : 0;
        ASSERT_EQ(static_cast<std::int8_t>(layout.codes[static_cast<std::size_t>(j * layout.k_pad + i)]), expected)
            << rows << "×" << cols << " at (" << i << ", " << j << ")";
      }
      EXPECT_EQ(layout.scales[static_cast<std::size_t>(j)], j < cols ? scale[static_cast<std::size_t>(j)] : 0.0f);
    }
  }
}

TEST(Int8DeviceLayout, EachDeviceCopyIsMadeOnceAndKeptByTheFactor) {
  const std::vector<std::int8_t> q{1, 2, 3, 4};
  const std::vector<float> scale{1.0f, 0.5f};
  const sc::Int8Factor factor(q.data(), 2, 2, 2, 1, scale.data());
  int made = 0;
  const auto make = [&] {
    ++made;
    return std::shared_ptr<const void>(std::make_shared<int>(made));
  };
  sc::detail::DeviceCopies& copies = factor.storage().copies;
  const auto first = copies.get_or_make(0, make);
  EXPECT_EQ(copies.get_or_make(0, make), first);
  const auto second = copies.get_or_make(1, make);
  EXPECT_NE(second, first);
  EXPECT_EQ(made, 2);
  EXPECT_EQ(&factor.storage().copies, &copies);
  // The CPU's packing is the host copy, made at construction: asking again gives the same one.
  EXPECT_EQ(&factor.packed(), &factor.packed());
}

}  // namespace
