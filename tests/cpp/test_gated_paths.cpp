// The registry of gated (device-unverified) paths: names, the program's overrides and their
// scoped restoration, the refusal, and the padded-width decision the CUDA backend takes from it.
// The environment's forms are tested from Python in fresh processes (tests/core/test_gated_paths.py):
// it is read once per process.
#include <gtest/gtest.h>

#include <cstdint>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>

#include "sketchcore/sketchcore.hpp"

using sketchcore::DType;
using sketchcore::GatedPath;

namespace {

constexpr GatedPath kAll[] = {GatedPath::cuda_padded_inner_width, GatedPath::cuda_performer_kernels,
                              GatedPath::jax_cuda_handlers, GatedPath::cuda_inner_activation,
                              GatedPath::cuda_int8_factors, GatedPath::cuda_fp8_factors};

/// The smallest width ≥ rank whose rows are a multiple of 16 bytes (8-byte elements: rank).
std::int64_t aligned(std::int64_t rank, std::int64_t bytes) {
  if (bytes >= 8) return rank;
  std::int64_t width = rank;
  while ((width * bytes) % 16 != 0) ++width;
  return width;
}

}  // namespace

TEST(GatedPaths, NamesRoundTripAndListTheRegistryInOrder) {
  const auto paths = sketchcore::gated_paths();
  ASSERT_EQ(paths.size(), std::size(kAll));
  for (std::size_t i = 0; i < paths.size(); ++i) {
    EXPECT_EQ(paths[i].path, kAll[i]);
    EXPECT_EQ(paths[i].name, sketchcore::gated_path_name(kAll[i]));
    EXPECT_EQ(sketchcore::gated_path_from_name(paths[i].name), kAll[i]);
    EXPECT_FALSE(paths[i].description.empty());
  }
  EXPECT_STREQ(sketchcore::gated_path_name(GatedPath::cuda_performer_kernels), "cuda_performer_kernels");
  try {
    sketchcore::gated_path_from_name("cuda_everything");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "gated path: name: expected one of cuda_padded_inner_width, cuda_performer_kernels, "
                           "jax_cuda_handlers, cuda_inner_activation, cuda_int8_factors, cuda_fp8_factors, got "
                           "'cuda_everything'");
  }
}

TEST(GatedPaths, OverridesWinAndScopesRestoreThePreviousOverride) {
  const GatedPath path = GatedPath::jax_cuda_handlers;
  ASSERT_FALSE(sketchcore::gated_path_override(path).has_value());
  {
    sketchcore::ScopedGatedPath open(path, true);
    EXPECT_TRUE(sketchcore::gated_path_enabled(path));
    EXPECT_EQ(sketchcore::gated_path_override(path), std::optional<bool>(true));
    {
      sketchcore::ScopedGatedPath closed(path, false);
      EXPECT_FALSE(sketchcore::gated_path_enabled(path));
      EXPECT_TRUE(sketchcore::gated_paths()[2].overridden);
    }
    EXPECT_TRUE(sketchcore::gated_path_enabled(path));
    EXPECT_FALSE(sketchcore::gated_path_override(GatedPath::cuda_padded_inner_width).has_value());
  }
  EXPECT_FALSE(sketchcore::gated_path_override(path).has_value());
  sketchcore::set_gated_path_enabled(path, false);
  EXPECT_FALSE(sketchcore::gated_path_enabled(path));
  sketchcore::set_gated_path_enabled(path, std::nullopt);
  EXPECT_FALSE(sketchcore::gated_paths()[2].overridden);
}

TEST(GatedPaths, AClosedPathIsRefusedNamingItAndTheSwitch) {
  sketchcore::ScopedGatedPath closed(GatedPath::cuda_performer_kernels, false);
  try {
    sketchcore::require_gated_path(GatedPath::cuda_performer_kernels, "performer_attention on a CUDA device");
    FAIL() << "no exception";
  } catch (const sketchcore::unverified_path_error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("performer_attention on a CUDA device: this runs the gated path 'cuda_performer_kernels'", 0),
              0u) << m;
    EXPECT_NE(m.find("SKETCHCORE_CUDA_UNVERIFIED=1 (or =cuda_performer_kernels)"), std::string::npos) << m;
    EXPECT_NE(m.find("set_gated_path_enabled"), std::string::npos) << m;
  }
  // A std::runtime_error, as errors.hpp promises (Python: RuntimeError).
  EXPECT_THROW(sketchcore::require_gated_path(GatedPath::cuda_performer_kernels, "x"), std::runtime_error);
  sketchcore::ScopedGatedPath open(GatedPath::cuda_performer_kernels, true);
  EXPECT_NO_THROW(sketchcore::require_gated_path(GatedPath::cuda_performer_kernels, "x"));
}

TEST(GatedPaths, TheCudaInnerWidthPadsOnlyThroughTheGate) {
  const struct {
    DType dtype;
    std::int64_t bytes;
  } types[] = {{DType::float16, 2}, {DType::bfloat16, 2}, {DType::float32, 4}, {DType::float64, 8}};
  for (const bool open : {false, true}) {
    sketchcore::ScopedGatedPath gate(GatedPath::cuda_padded_inner_width, open);
    for (const auto& t : types) {
      for (std::int64_t rank = 0; rank <= 700; ++rank) {
        EXPECT_EQ(sketchcore::cuda_inner_width(rank, t.dtype), open ? aligned(rank, t.bytes) : rank)
            << "rank " << rank << " " << sketchcore::dtype_name(t.dtype) << (open ? " open" : " closed");
      }
    }
  }
  EXPECT_THROW(sketchcore::cuda_inner_width(-1, DType::float32), std::invalid_argument);
}
