// The skinny GEMM kernels (cpu/gemm_skinny.cpp, compiled into this test with the library's flags)
// against a float64 triple loop: every row count they take (1 to kSkinnyRows), both layouts of A
// and of B, leading dimensions wider than the rows, inner extents that are and are not multiples
// of the dot product's 16 lanes, alpha and beta, C outside its columns untouched, C not read when
// beta = 0 (it holds NaN), and where a NaN in A or B goes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "cpu/gemm_skinny.hpp"

namespace d = sketchcore::detail;

namespace {

/// A rows × cols matrix stored row-major (column-major when `transposed`), leading dimension 3
/// wider than needed.
template <class T>
struct Matrix {
  std::int64_t rows, cols;
  bool transposed;
  std::int64_t ld;
  std::vector<T> data;
  T at(std::int64_t i, std::int64_t j) const { return data[static_cast<std::size_t>(transposed ? j * ld + i : i * ld + j)]; }
  d::MatrixOperand<T> operand() const { return {data.data(), transposed, ld}; }
};

template <class T>
Matrix<T> random_matrix(std::int64_t rows, std::int64_t cols, bool transposed, std::mt19937& gen) {
  Matrix<T> m{rows, cols, transposed, (transposed ? rows : cols) + 3, {}};
  m.data.resize(static_cast<std::size_t>((transposed ? cols : rows) * m.ld));
  std::normal_distribution<double> normal;
  for (auto& v : m.data) v = static_cast<T>(normal(gen));
  return m;
}

template <class T>
void check_against_triple_loop(std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb, double alpha,
                               double beta, std::mt19937& gen) {
  const Matrix<T> a = random_matrix<T>(m, k, ta, gen), b = random_matrix<T>(k, n, tb, gen);
  const std::int64_t ldc = n + 5;
  std::vector<T> c(static_cast<std::size_t>(m * ldc));
  std::normal_distribution<double> normal;
  for (auto& v : c) v = beta == 0.0 ? std::numeric_limits<T>::quiet_NaN() : static_cast<T>(normal(gen));
  const std::vector<T> before = c;
  d::gemm_skinny<T>(m, n, k, static_cast<T>(alpha), a.operand(), b.operand(), c.data(), ldc, static_cast<T>(beta));
  const double tolerance = std::is_same_v<T, float> ? 2e-6 * std::sqrt(static_cast<double>(k)) : 1e-14;
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < ldc; ++j) {
      const auto at = static_cast<std::size_t>(i * ldc + j);
      if (j >= n) {  // outside C's columns: untouched (NaN stays NaN)
        EXPECT_TRUE(std::isnan(before[at]) ? std::isnan(c[at]) : c[at] == before[at]) << "i " << i << " j " << j;
        continue;
      }
      double sum = 0.0, magnitude = 0.0;
      for (std::int64_t l = 0; l < k; ++l) {
        sum += static_cast<double>(a.at(i, l)) * static_cast<double>(b.at(l, j));
        magnitude += std::abs(static_cast<double>(a.at(i, l)) * static_cast<double>(b.at(l, j)));
      }
      const double old = beta == 0.0 ? 0.0 : beta * static_cast<double>(before[at]);  // NaN when beta = 0: unread
      const double expected = alpha * sum + old;
      const double scale = std::abs(alpha) * magnitude + std::abs(old) + 1e-300;
      EXPECT_LE(std::abs(static_cast<double>(c[at]) - expected), tolerance * scale)
          << "m " << m << " n " << n << " k " << k << " ta " << ta << " tb " << tb << " i " << i << " j " << j;
    }
  }
}

template <class T>
class GemmSkinny : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(GemmSkinny, Types);

TYPED_TEST(GemmSkinny, MatchesATripleLoopForEveryLayoutAndRowCount) {
  std::mt19937 gen(7);
  for (std::int64_t m = 1; m <= d::kSkinnyRows; ++m) {
    for (const auto& [n, k] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {37, 16}, {130, 33}, {8, 257}}) {
      for (const bool ta : {false, true}) {
        for (const bool tb : {false, true}) {
          check_against_triple_loop<TypeParam>(m, n, k, ta, tb, 1.0, 0.0, gen);
          check_against_triple_loop<TypeParam>(m, n, k, ta, tb, -0.75, 1.0, gen);
          check_against_triple_loop<TypeParam>(m, n, k, ta, tb, 2.0, 0.5, gen);
        }
      }
    }
  }
}

TYPED_TEST(GemmSkinny, AppliesToFewRowsAndNonEmptyProductsOnly) {
  EXPECT_TRUE(d::gemm_skinny_applies(1, 1, 1));
  EXPECT_TRUE(d::gemm_skinny_applies(d::kSkinnyRows, 5000, 3));
  EXPECT_FALSE(d::gemm_skinny_applies(d::kSkinnyRows + 1, 8, 8));
  EXPECT_FALSE(d::gemm_skinny_applies(0, 8, 8));
  EXPECT_FALSE(d::gemm_skinny_applies(1, 0, 8));
  EXPECT_FALSE(d::gemm_skinny_applies(1, 8, 0));
}

TYPED_TEST(GemmSkinny, ANaNReachesExactlyTheOutputsItFeeds) {
  using T = TypeParam;
  std::mt19937 gen(11);
  for (const bool tb : {false, true}) {
    Matrix<T> a = random_matrix<T>(2, 20, false, gen), b = random_matrix<T>(20, 9, tb, gen);
    a.data[static_cast<std::size_t>(1 * a.ld + 4)] = std::numeric_limits<T>::quiet_NaN();  // A(1, 4)
    std::vector<T> c(2 * 9);
    d::gemm_skinny<T>(2, 9, 20, T(1), a.operand(), b.operand(), c.data(), 9, T(0));
    for (std::int64_t j = 0; j < 9; ++j) {
      EXPECT_FALSE(std::isnan(c[static_cast<std::size_t>(j)])) << j;  // row 0 never reads A(1, ·)
      EXPECT_TRUE(std::isnan(c[static_cast<std::size_t>(9 + j)])) << j;
    }
  }
}

}  // namespace
