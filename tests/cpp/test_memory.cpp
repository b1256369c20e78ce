#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <thread>
#include <vector>

#include "sketchcore/sketchcore.hpp"

using sketchcore::CachingHostPool;

TEST(CachingHostPool, SizeClassesRoundUpByAtMostAQuarter) {
  EXPECT_EQ(CachingHostPool::size_class(1), 512u);
  EXPECT_EQ(CachingHostPool::size_class(512), 512u);
  EXPECT_EQ(CachingHostPool::size_class(513), 640u);
  EXPECT_EQ(CachingHostPool::size_class(1024), 1024u);
  EXPECT_EQ(CachingHostPool::size_class(1025), 1280u);
  for (std::size_t b = 1; b < (1u << 26); b = b * 3 + 7) {
    const std::size_t c = CachingHostPool::size_class(b);
    EXPECT_GE(c, b);
    EXPECT_LE(c, std::max<std::size_t>(512, b + b / 4 + 64));
    EXPECT_EQ(c % 64, 0u);
  }
}

TEST(CachingHostPool, ReusesFreedBlocksAndCountsThem) {
  CachingHostPool pool;
  void* a = pool.allocate(1000);
  auto s = pool.stats();
  EXPECT_EQ(s.current_bytes, 1024u);
  EXPECT_EQ(s.reserved_bytes, 1024u);
  EXPECT_EQ(s.num_allocs, 1u);
  EXPECT_EQ(s.num_cache_hits, 0u);
  pool.deallocate(a, 1000);
  void* b = pool.allocate(900);  // same class
  EXPECT_EQ(a, b);
  s = pool.stats();
  EXPECT_EQ(s.num_cache_hits, 1u);
  EXPECT_EQ(s.reserved_bytes, 1024u);
  pool.deallocate(b, 900);
  EXPECT_EQ(pool.stats().current_bytes, 0u);
  pool.empty_cache();
  EXPECT_EQ(pool.stats().reserved_bytes, 0u);
}

TEST(CachingHostPool, PeakTracksAndResets) {
  CachingHostPool pool;
  void* a = pool.allocate(4096);
  void* b = pool.allocate(4096);
  pool.deallocate(a, 4096);
  EXPECT_EQ(pool.stats().peak_bytes, 8192u);
  pool.reset_peak();
  EXPECT_EQ(pool.stats().peak_bytes, 4096u);
  pool.deallocate(b, 4096);
}

TEST(CachingHostPool, LimitReleasesCacheThenThrowsWithoutLeaking) {
  CachingHostPool pool;
  pool.deallocate(pool.allocate(8192), 8192);  // 8 KiB cached
  pool.set_limit(10000);
  void* a = pool.allocate(4096);  // needs the cache released to fit
  EXPECT_EQ(pool.stats().reserved_bytes, 4096u);
  try {
    pool.allocate(8192);
    FAIL() << "no exception";
  } catch (const sketchcore::out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("limit of 10000 bytes"), std::string::npos) << e.what();
  }
  EXPECT_EQ(pool.stats().current_bytes, 4096u);
  pool.deallocate(a, 4096);
  pool.set_limit(std::nullopt);
  pool.deallocate(pool.allocate(8192), 8192);
  EXPECT_EQ(pool.stats().current_bytes, 0u);
}

TEST(CachingHostPool, ThreadSafeUnderContention) {
  CachingHostPool pool;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, t] {
      for (int i = 0; i < 2000; ++i) {
        const std::size_t bytes = 512u * static_cast<std::size_t>(1 + (i + t) % 7);
        void* p = pool.allocate(bytes);
        static_cast<char*>(p)[0] = 1;
        pool.deallocate(p, bytes);
      }
    });
  }
  for (auto& th : threads) th.join();
  const auto s = pool.stats();
  EXPECT_EQ(s.current_bytes, 0u);
  EXPECT_EQ(s.num_allocs, 8000u);
  EXPECT_GT(s.num_cache_hits, 7000u);
}

TEST(HostPool, SketchedMatmulReturnsEveryTemporaryAndHonoursTheLimit) {
  using sketchcore::DType;
  using sketchcore::TensorView;
  std::vector<float> x(200 * 64, 1.0f), S(3 * 64 * 8, 0.5f), U(3 * 8 * 16, 0.25f), y(200 * 16);
  auto call = [&] {
    sketchcore::sketched_matmul(TensorView(x.data(), DType::float32, {200, 64}),
                                TensorView(S.data(), DType::float32, {3, 64, 8}),
                                TensorView(U.data(), DType::float32, {3, 8, 16}),
                                TensorView(y.data(), DType::float32, {200, 16}));
  };
  auto& pool = sketchcore::default_host_pool();
  const auto before = pool.stats();
  call();
  EXPECT_EQ(pool.stats().current_bytes, before.current_bytes);
  EXPECT_GT(pool.stats().num_allocs, before.num_allocs);
  EXPECT_FLOAT_EQ(y[0], 3 * 8 * 64 * 0.5f * 0.25f);
  pool.empty_cache();
  pool.set_limit(1024);
  EXPECT_THROW(call(), sketchcore::out_of_memory);
  EXPECT_EQ(pool.stats().current_bytes, before.current_bytes);
  pool.set_limit(std::nullopt);
  call();
}

namespace {

/// A device resource that is never asked for memory here (no device): only installed.
class UnusedDeviceResource final : public sketchcore::DeviceMemoryResource {
 public:
  void* allocate(std::size_t, int, void*) override { throw sketchcore::out_of_memory("unused"); }
  void deallocate(void*, std::size_t, int, void*) noexcept override {}
};

TEST(DeviceMemoryResource, IsInstalledAndResetToTheOwnPool) {
  EXPECT_EQ(sketchcore::device_memory_resource(), nullptr);  // default: sketchcore's pool
  UnusedDeviceResource resource;
  sketchcore::set_device_memory_resource(&resource);
  EXPECT_EQ(sketchcore::device_memory_resource(), &resource);
  sketchcore::set_device_memory_resource(nullptr);
  EXPECT_EQ(sketchcore::device_memory_resource(), nullptr);
}

}  // namespace
