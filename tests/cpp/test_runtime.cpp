#include <gtest/gtest.h>

#include "sketchcore/sketchcore.hpp"

TEST(Runtime, ThreadCountRoundTripsAndRejectsZero) {
  const int before = sketchcore::get_num_threads();
  sketchcore::set_num_threads(1);
  EXPECT_EQ(sketchcore::get_num_threads(), 1);
  EXPECT_THROW(sketchcore::set_num_threads(0), std::invalid_argument);
  EXPECT_EQ(sketchcore::get_num_threads(), 1);
  sketchcore::set_num_threads(before);
  EXPECT_EQ(sketchcore::get_num_threads(), before);
}

TEST(Runtime, BuildInfoMatchesHeaders) {
  const auto info = sketchcore::build_info();
  EXPECT_EQ(info.version, SKETCHCORE_VERSION_STRING);
  EXPECT_FALSE(info.blas.empty());
  if (!info.cuda) {
    EXPECT_EQ(info.cuda_runtime_version, 0);
  }
}
