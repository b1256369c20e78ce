// Philox4x32-10 against the known-answer vectors published with Random123 (kat_vectors).
#include <gtest/gtest.h>

#include <cstdint>
#include <set>

#include "detail/philox.hpp"

using sketchcore::detail::Philox4x32;
using sketchcore::detail::philox4x32_10;

namespace {

void expect_kat(Philox4x32 counter, std::uint32_t k0, std::uint32_t k1, Philox4x32 expected) {
  const Philox4x32 got = philox4x32_10(counter, k0, k1);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got.v[i], expected.v[i]) << "word " << i;
}

TEST(Philox, KnownAnswerZero) {
  expect_kat({{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}});
}

TEST(Philox, KnownAnswerAllOnes) {
  expect_kat({{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu,
             {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}});
}

TEST(Philox, KnownAnswerPi) {
  expect_kat({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u,
             {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}});
}

TEST(Philox, DropoutBlocksDifferAcrossRowsColumnsAndSeeds) {
  using sketchcore::detail::dropout_block;
  std::set<std::uint32_t> seen;
  for (std::uint64_t seed : {1ull, 2ull, 1ull << 40}) {
    for (std::uint64_t row : {0ull, 1ull, 1ull << 33}) {
      for (std::uint64_t group : {0ull, 1ull}) seen.insert(dropout_block(seed, row, group).v[0]);
    }
  }
  EXPECT_EQ(seen.size(), 18u);
}

}  // namespace
