// CpuGemmProvider: a thread's CPU GEMMs go to the provider it sets (reference-BLAS
// convention, LP64 or ILP64), with results equal to the float64 reference, and only there.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "reference.hpp"

using sketchcore::DType;
using sketchcore::TensorView;
using namespace sketchcore_test;

namespace {

std::atomic<int> g_calls{0};

/// A column-major reference gemm: C = alpha·op(A)·op(B) + beta·C, counted.
template <class I, class T>
void naive_gemm(const char* transa, const char* transb, const I* m, const I* n, const I* k, const T* alpha,
                const T* a, const I* lda, const T* b, const I* ldb, const T* beta, T* c, const I* ldc) {
  ++g_calls;
  const bool ta = *transa == 'T', tb = *transb == 'T';
  for (I j = 0; j < *n; ++j) {
    for (I i = 0; i < *m; ++i) {
      double acc = 0;
      for (I p = 0; p < *k; ++p) {
        const double av = ta ? a[p + i * *lda] : a[i + p * *lda];
        const double bv = tb ? b[j + p * *ldb] : b[p + j * *ldb];
        acc += av * bv;
      }
      T& out = c[i + j * *ldc];
      out = static_cast<T>(*alpha * acc + (*beta == T(0) ? 0.0 : *beta * double(out)));
    }
  }
}

template <class I>
sketchcore::CpuGemmProvider provider() {
  sketchcore::CpuGemmProvider p;
  p.sgemm = reinterpret_cast<void*>(&naive_gemm<I, float>);
  p.dgemm = reinterpret_cast<void*>(&naive_gemm<I, double>);
  p.index_bits = sizeof(I) * 8;
  return p;
}

template <class T>
double forward_error(std::int64_t rows, std::int64_t d_in, std::int64_t terms, std::int64_t k, std::int64_t d_out) {
  std::mt19937_64 gen(rows * 131 + d_out);
  const auto x = random_vector(rows * d_in, gen), S = random_vector(terms * d_in * k, gen),
             U = random_vector(terms * k * d_out, gen);
  auto xt = cast<T>(x), St = cast<T>(S), Ut = cast<T>(U);
  std::vector<T> y(static_cast<std::size_t>(rows * d_out));
  const DType dtype = sizeof(T) == 4 ? DType::float32 : DType::float64;
  sketchcore::Epilogue epi;
  epi.scale = 0.5;
  sketchcore::sketched_matmul(TensorView(xt.data(), dtype, {rows, d_in}), TensorView(St.data(), dtype, {terms, d_in, k}),
                              TensorView(Ut.data(), dtype, {terms, k, d_out}), TensorView(y.data(), dtype, {rows, d_out}),
                              epi);
  return relative_error(y, reference(x, S, U, nullptr, rows, d_in, terms, k, d_out, 0.5, sketchcore::Activation::none));
}

template <class I>
void check_provider() {
  const sketchcore::CpuGemmProvider p = provider<I>();
  g_calls = 0;
  {
    sketchcore::ExecutionScope scope({nullptr, false, &p});
    EXPECT_LT(forward_error<float>(37, 300, 3, 5, 23), 1e-5);
    EXPECT_LT(forward_error<double>(37, 300, 3, 5, 23), 1e-13);
    EXPECT_GE(g_calls.load(), 4);  // two GEMMs per call, both precisions
    const int before = g_calls.load();
    std::thread([] { forward_error<float>(5, 7, 1, 2, 3); }).join();  // another thread: the built-in BLAS
    EXPECT_EQ(g_calls.load(), before);
  }
  const int after_scope = g_calls.load();
  EXPECT_LT(forward_error<float>(5, 7, 1, 2, 3), 1e-5);
  EXPECT_EQ(g_calls.load(), after_scope);  // the scope ended: the built-in BLAS again
}

TEST(CpuGemmProvider, Lp64ProviderRunsTheThreadsGemms) { check_provider<std::int32_t>(); }

TEST(CpuGemmProvider, Ilp64ProviderRunsTheThreadsGemms) { check_provider<std::int64_t>(); }

TEST(CpuGemmProvider, AMissingPrecisionFallsBackToTheBuiltInBlas) {
  sketchcore::CpuGemmProvider p = provider<std::int32_t>();
  p.dgemm = nullptr;
  g_calls = 0;
  sketchcore::ExecutionScope scope({nullptr, false, &p});
  EXPECT_LT(forward_error<double>(9, 11, 2, 3, 4), 1e-13);
  EXPECT_EQ(g_calls.load(), 0);
}

}  // namespace
