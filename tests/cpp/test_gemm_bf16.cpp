// The native bfloat16 GEMM (cpu/gemm_bf16.cpp, compiled into this test with the library's flags)
// against a float64 reference of the same bfloat16 values: every transposition of A and B,
// leading dimensions wider than the rows, extents that are not multiples of the register tile
// (8 × 32), odd inner extents (a pair completed with zero), more than one packed slab of inner
// indices (512) and of columns (1024), alpha and beta, C outside its columns untouched, and C not
// read when beta = 0. Runs where the CPU has AVX512_BF16 (skipped elsewhere, saying so). The AMX
// kernel (cpu/gemm_bf16_amx.cpp) and the VDPBF16PS kernel are also run by name, on the same
// cases plus the AMX tiles' edges (extents not multiples of 16 or 32), and against each other,
// where the CPU has AMX-BF16 and the tile state is granted.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "cpu/amx_support.hpp"
#include "cpu/gemm_bf16.hpp"
#include "cpu/half.hpp"

namespace d = sketchcore::detail;

// The library's parallel_for is internal (hidden), so this test brings its own: three chunks
// on three threads, so that tiles and packing really run concurrently.
namespace sketchcore::detail {
void parallel_for(std::int64_t n, std::int64_t grain, const std::function<void(std::int64_t, std::int64_t)>& body) {
  const std::int64_t parts = std::max<std::int64_t>(1, std::min<std::int64_t>(3, n / std::max<std::int64_t>(grain, 1)));
  std::vector<std::thread> threads;
  for (std::int64_t p = 1; p < parts; ++p) threads.emplace_back(body, n * p / parts, n * (p + 1) / parts);
  body(0, n / parts);
  for (auto& t : threads) t.join();
}
}  // namespace sketchcore::detail

namespace {

/// A rows × cols bfloat16 matrix stored row-major (or column-major when `transposed`) with a
/// leading dimension 3 wider than needed.
struct Matrix {
  std::int64_t rows, cols;
  bool transposed;
  std::int64_t ld;
  std::vector<std::uint16_t> bits;
  float at(std::int64_t i, std::int64_t j) const {
    return d::bfloat16_to_float(bits[static_cast<std::size_t>(transposed ? j * ld + i : i * ld + j)]);
  }
  d::Bf16Operand operand() const { return {bits.data(), transposed, ld}; }
};

Matrix random_matrix(std::int64_t rows, std::int64_t cols, bool transposed, std::mt19937& gen, bool integers) {
  Matrix m{rows, cols, transposed, (transposed ? rows : cols) + 3, {}};
  m.bits.resize(static_cast<std::size_t>((transposed ? cols : rows) * m.ld));
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> small(-8, 8);
  for (auto& b : m.bits) b = d::float_to_bfloat16(integers ? static_cast<float>(small(gen)) : normal(gen));
  return m;
}

struct Case {
  std::int64_t m, n, k;
};

/// One of the kernels: gemm_bf16 (whichever the CPU and environment choose), gemm_bf16_amx or
/// gemm_bf16_vdpbf16ps.
using Kernel = void (*)(std::int64_t, std::int64_t, std::int64_t, float, const d::Bf16Operand&, const d::Bf16Operand&,
                        float*, std::int64_t, float);

void chosen_kernel(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const d::Bf16Operand& a,
                   const d::Bf16Operand& b, float* c, std::int64_t ldc, float beta) {
  d::gemm_bf16(m, n, k, alpha, a, b, c, ldc, beta);
}

/// Runs C = alpha·A·B + beta·C0 and checks every element against float64 within the float32
/// summation bound (k + 2)·2⁻²⁴·(|alpha|·Σ|a||b| + |beta·c0|), or exactly when `integers`.
void check(const Case& c, bool ta, bool tb, float alpha, float beta, bool integers, std::mt19937& gen,
           Kernel kernel = chosen_kernel) {
  const Matrix a = random_matrix(c.m, c.k, ta, gen, integers), b = random_matrix(c.k, c.n, tb, gen, integers);
  const std::int64_t ldc = c.n + 5;
  const float sentinel = -12345.0f;
  std::vector<float> out(static_cast<std::size_t>(c.m * ldc), sentinel), c0(out.size());
  std::normal_distribution<float> normal;
  for (std::int64_t i = 0; i < c.m; ++i) {
    for (std::int64_t j = 0; j < c.n; ++j) {
      // beta = 0: C must not be read, so NaN there must not reach the result
      c0[i * ldc + j] = integers ? 3.0f : normal(gen);
      out[i * ldc + j] = beta == 0.0f ? std::numeric_limits<float>::quiet_NaN() : c0[i * ldc + j];
    }
  }
  kernel(c.m, c.n, c.k, alpha, a.operand(), b.operand(), out.data(), ldc, beta);
  double worst = 0;
  for (std::int64_t i = 0; i < c.m; ++i) {
    for (std::int64_t j = 0; j < ldc; ++j) {
      const float got = out[static_cast<std::size_t>(i * ldc + j)];
      if (j >= c.n) {
        ASSERT_EQ(got, sentinel) << "wrote column " << j << " past n = " << c.n;
        continue;
      }
      double sum = 0, magnitude = 0;
      for (std::int64_t q = 0; q < c.k; ++q) {
        sum += double(a.at(i, q)) * b.at(q, j);
        magnitude += std::fabs(double(a.at(i, q)) * b.at(q, j));
      }
      const double c_term = beta == 0.0f ? 0.0 : double(beta) * c0[static_cast<std::size_t>(i * ldc + j)];
      const double want = double(alpha) * sum + c_term;
      const double bound = integers ? 0.0 : double(c.k + 2) * 0x1p-24 * (std::fabs(alpha) * magnitude + std::fabs(c_term));
      ASSERT_LE(std::fabs(got - want), bound) << "C[" << i << "][" << j << "] of " << c.m << "×" << c.k << "·" << c.k
                                              << "×" << c.n << " ta " << ta << " tb " << tb;
      worst = std::max(worst, bound > 0 ? std::fabs(got - want) / bound : 0.0);
    }
  }
  EXPECT_LE(worst, 1.0);
}

class GemmBf16 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!d::gemm_bf16_available()) GTEST_SKIP() << "this CPU has no AVX512_BF16 (or SKETCHCORE_BF16_GEMM=0)";
  }
};

TEST_F(GemmBf16, MatchesFloat64OnEveryLayoutAndEdgeExtent) {
  std::mt19937 gen(11);
  const Case cases[] = {{1, 1, 1}, {7, 33, 5}, {37, 45, 53}, {64, 256, 512}, {9, 31, 513}, {70, 1030, 37}, {130, 40, 1100}};
  for (const Case& c : cases) {
    for (int layout = 0; layout < 4; ++layout) {
      check(c, layout & 1, (layout & 2) != 0, 0.75f, layout == 3 ? 0.5f : 0.0f, false, gen);
    }
  }
}

TEST_F(GemmBf16, SmallIntegersAreExactAcrossSlabs) {
  std::mt19937 gen(5);
  // Sums of products of integers in [-8, 8] stay far below 2^24: every partial sum is exact.
  check({19, 1100, 1201}, false, false, 1.0f, 1.0f, true, gen);
  check({33, 70, 1025}, true, true, 2.0f, 0.0f, true, gen);
}

TEST_F(GemmBf16, EmptyInnerExtentScalesC) {
  std::vector<float> c = {1.0f, -2.0f, 4.0f, 8.0f};
  const std::uint16_t none = 0;
  d::gemm_bf16(2, 2, 0, 1.0f, {&none, false, 1}, {&none, false, 2}, c.data(), 2, 0.5f);
  EXPECT_EQ(c, (std::vector<float>{0.5f, -1.0f, 2.0f, 4.0f}));
  c[0] = std::numeric_limits<float>::quiet_NaN();
  d::gemm_bf16(2, 2, 0, 1.0f, {&none, false, 1}, {&none, false, 2}, c.data(), 2, 0.0f);
  EXPECT_EQ(c, (std::vector<float>(4, 0.0f)));
}

TEST_F(GemmBf16, InfinitiesAndNaNPropagate) {
  std::mt19937 gen(3);
  Matrix a = random_matrix(9, 40, false, gen, false), b = random_matrix(40, 33, false, gen, false);
  a.bits[static_cast<std::size_t>(2 * a.ld + 7)] = 0x7F80;   // +inf in row 2
  b.bits[static_cast<std::size_t>(11 * b.ld + 30)] = 0x7FC0;  // NaN in column 30
  std::vector<float> c(9 * 33);
  d::gemm_bf16(9, 33, 40, 1.0f, a.operand(), b.operand(), c.data(), 33, 0.0f);
  for (std::int64_t i = 0; i < 9; ++i) {
    for (std::int64_t j = 0; j < 33; ++j) {
      const float v = c[static_cast<std::size_t>(i * 33 + j)];
      if (j == 30 || (i == 2 && b.at(7, j) == 0.0f)) {
        EXPECT_TRUE(std::isnan(v)) << i << "," << j;
      } else if (i == 2) {
        EXPECT_TRUE(std::isinf(v) && (v > 0) == (b.at(7, j) > 0)) << i << "," << j << " " << v;
      } else {
        EXPECT_TRUE(std::isfinite(v)) << i << "," << j;
      }
    }
  }
}

TEST_F(GemmBf16, ColumnSumsMatchFloat64AndAccumulate) {
  std::mt19937 gen(21);
  for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {37, 70}, {300, 257}, {5, 1030}}) {
    const Matrix m = random_matrix(rows, cols, false, gen, false);
    std::vector<float> sums(static_cast<std::size_t>(cols) + 1, -7.0f);  // one past the end: untouched
    d::bfloat16_column_sums(m.bits.data(), m.ld, rows, cols, sums.data(), false);
    std::vector<float> once(sums.begin(), sums.end() - 1);
    d::bfloat16_column_sums(m.bits.data(), m.ld, rows, cols, sums.data(), true);  // adds a second time
    EXPECT_EQ(sums.back(), -7.0f);
    for (std::int64_t j = 0; j < cols; ++j) {
      double want = 0, magnitude = 0;
      for (std::int64_t i = 0; i < rows; ++i) {
        want += m.at(i, j);
        magnitude += std::fabs(m.at(i, j));
      }
      const double bound = double(rows + 2) * 0x1p-24 * magnitude;
      ASSERT_LE(std::fabs(once[static_cast<std::size_t>(j)] - want), bound) << rows << "×" << cols << " column " << j;
      ASSERT_LE(std::fabs(sums[static_cast<std::size_t>(j)] - 2 * want), 2 * bound + 0x1p-23 * std::fabs(2 * want));
    }
  }
}

class GemmBf16Amx : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!d::gemm_bf16_available() || !d::amx_bf16_supported()) {
      GTEST_SKIP() << "this CPU has no AMX-BF16 (or the tile state was refused, or SKETCHCORE_BF16_GEMM=0)";
    }
  }
};

// Extents around the AMX tiles' (16 rows, 16 columns, 32 inner indices) and blocks' (32 × 32,
// tasks of 64 rows × 256 columns), odd inner extents, and more than one slab of each kind.
const Case kAmxCases[] = {{1, 1, 1},     {16, 16, 32},   {17, 15, 31},    {32, 32, 64},   {33, 47, 33},
                          {64, 256, 512}, {65, 257, 513}, {96, 1030, 384}, {130, 40, 1100}, {7, 33, 5}};

TEST_F(GemmBf16Amx, BothKernelsMatchFloat64OnEveryLayoutAndTileEdge) {
  std::mt19937 gen(17);
  for (const Case& c : kAmxCases) {
    for (int layout = 0; layout < 4; ++layout) {
      for (Kernel kernel : {Kernel{d::gemm_bf16_amx}, Kernel{d::gemm_bf16_vdpbf16ps}}) {
        check(c, layout & 1, (layout & 2) != 0, layout == 2 ? 1.0f : 0.75f, layout >= 2 ? 0.5f : 0.0f, false, gen,
              kernel);
      }
    }
  }
}

TEST_F(GemmBf16Amx, SmallIntegersAreExactAcrossSlabs) {
  std::mt19937 gen(6);
  check({19, 1100, 1201}, false, false, 1.0f, 1.0f, true, gen, d::gemm_bf16_amx);
  check({33, 70, 1025}, true, true, 2.0f, 0.0f, true, gen, d::gemm_bf16_amx);
  check({64, 64, 1024}, false, true, -1.0f, 0.0f, true, gen, d::gemm_bf16_amx);
}

TEST_F(GemmBf16Amx, AgreesWithTheVdpbf16psKernelUpToSummationOrder) {
  std::mt19937 gen(23);
  for (const Case& c : kAmxCases) {
    const Matrix a = random_matrix(c.m, c.k, c.m % 2 == 1, gen, false), b = random_matrix(c.k, c.n, false, gen, false);
    std::vector<float> amx(static_cast<std::size_t>(c.m * c.n)), vdp(amx.size());
    d::gemm_bf16_amx(c.m, c.n, c.k, 1.0f, a.operand(), b.operand(), amx.data(), c.n, 0.0f);
    d::gemm_bf16_vdpbf16ps(c.m, c.n, c.k, 1.0f, a.operand(), b.operand(), vdp.data(), c.n, 0.0f);
    for (std::int64_t i = 0; i < c.m; ++i) {
      for (std::int64_t j = 0; j < c.n; ++j) {
        double magnitude = 0;
        for (std::int64_t q = 0; q < c.k; ++q) magnitude += std::fabs(double(a.at(i, q)) * b.at(q, j));
        const std::size_t at = static_cast<std::size_t>(i * c.n + j);
        // each within (k + 2)·2⁻²⁴·Σ|a||b| of the exact sum, so within twice that of each other
        ASSERT_LE(std::fabs(double(amx[at]) - vdp[at]), 2 * double(c.k + 2) * 0x1p-24 * magnitude)
            << "C[" << i << "][" << j << "] of " << c.m << "×" << c.k << "·" << c.k << "×" << c.n;
      }
    }
  }
}

TEST_F(GemmBf16Amx, FlushesSubnormalProductsAndPropagatesInfinities) {
  // 2⁻⁷⁰ · 2⁻⁶⁰ = 2⁻¹³⁰ is a float32 subnormal: flushed, so the sum of 40 of them is 0.
  Matrix a{3, 40, false, 40, std::vector<std::uint16_t>(120, d::float_to_bfloat16(0x1p-70f))};
  Matrix b{40, 2, false, 2, std::vector<std::uint16_t>(80, d::float_to_bfloat16(0x1p-60f))};
  b.bits[1] = 0x7F80;  // +inf at B[0][1]: column 1 is +inf
  std::vector<float> c(6, 5.0f);
  d::gemm_bf16_amx(3, 2, 40, 1.0f, a.operand(), b.operand(), c.data(), 2, 0.0f);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(c[static_cast<std::size_t>(2 * i)], 0.0f) << i;
    EXPECT_TRUE(std::isinf(c[static_cast<std::size_t>(2 * i + 1)])) << i;
  }
}

}  // namespace
