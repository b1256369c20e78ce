#include <gtest/gtest.h>

#include <stdexcept>
#include <thread>

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

TEST(Runtime, ExecutionScopesNestAndArePerThread) {
  int a = 0, b = 0;
  EXPECT_EQ(sketchcore::current_execution().cuda_stream, nullptr);
  EXPECT_FALSE(sketchcore::current_execution().allow_tf32);
  {
    sketchcore::ExecutionScope outer({&a, true});
    EXPECT_EQ(sketchcore::current_execution().cuda_stream, &a);
    {
      sketchcore::ExecutionScope inner({&b, false});
      EXPECT_EQ(sketchcore::current_execution().cuda_stream, &b);
      EXPECT_FALSE(sketchcore::current_execution().allow_tf32);
      void* seen_elsewhere = &a;
      std::thread([&] { seen_elsewhere = sketchcore::current_execution().cuda_stream; }).join();
      EXPECT_EQ(seen_elsewhere, nullptr);  // another thread keeps its own defaults
    }
    EXPECT_EQ(sketchcore::current_execution().cuda_stream, &a);
    EXPECT_TRUE(sketchcore::current_execution().allow_tf32);
  }
  EXPECT_EQ(sketchcore::current_execution().cuda_stream, nullptr);
}

TEST(Runtime, CudaDeviceCountMatchesTheBuild) {
  const int count = sketchcore::cuda_device_count();
  EXPECT_GE(count, 0);
  if (!sketchcore::build_info().cuda) {
    EXPECT_EQ(count, 0);
  }
}

TEST(Runtime, DeviceMemoryStatsOfAnUnusedDeviceAreZeroAndBadOrdinalsThrow) {
  const sketchcore::MemoryStats s = sketchcore::device_memory_stats(0);
  if (sketchcore::cuda_device_count() == 0) {
    EXPECT_EQ(s.current_bytes, 0u);
    EXPECT_EQ(s.reserved_bytes, 0u);
    EXPECT_NO_THROW(sketchcore::device_reset_peak(0));
    EXPECT_NO_THROW(sketchcore::device_empty_cache(0));
  }
  EXPECT_THROW(sketchcore::device_memory_stats(-1), std::invalid_argument);
  EXPECT_THROW(sketchcore::device_reset_peak(-2), std::invalid_argument);
}
