// Performer attention through the public C++ API against a naive float64 reference (the
// quadratic formula: every φ(q_i)·φ(k_j) formed, masked when causal), its backward against
// central differences of that reference, the register-tiled products of every instruction set
// against a triple loop (white box: cpu/performer_gemm.cpp is compiled into this test), and the
// error messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cpu/performer_gemm.hpp"
#include "reference.hpp"

using sketchcore::DType;
using sketchcore::PerformerKernel;
using sketchcore::PerformerOptions;
using sketchcore::TensorView;
using namespace sketchcore_test;

namespace {

struct Sizes {
  std::int64_t B, H, L, S, d, e, m;
};

struct Problem {
  Sizes n;
  std::vector<double> q, k, v, W, kw, vw;
};

Problem random_problem(Sizes n, std::uint64_t seed, bool weights) {
  std::mt19937_64 gen(seed);
  Problem p{n, random_vector(n.B * n.H * n.L * n.d, gen), random_vector(n.B * n.H * n.S * n.d, gen),
            random_vector(n.B * n.H * n.S * n.e, gen), random_vector(n.m * n.d, gen), {}, {}};
  if (weights) {
    std::uniform_real_distribution<double> u(0.0, 2.0);
    p.kw.resize(static_cast<std::size_t>(n.B * n.S));
    for (std::size_t i = 0; i < p.kw.size(); ++i) p.kw[i] = (i % static_cast<std::size_t>(n.S)) == 0 || u(gen) > 0.6;
    p.vw.resize(static_cast<std::size_t>(n.B * n.H * n.S));
    for (auto& w : p.vw) w = u(gen);
  }
  return p;
}

/// φ of row x (d) in float64, as performer.hpp defines it.
std::vector<double> features(const double* x, const Problem& p, bool query, bool causal, PerformerKernel kernel,
                             double key_constant) {
  const std::int64_t d = p.n.d, m = p.n.m;
  std::vector<double> phi(static_cast<std::size_t>(m)), dash(static_cast<std::size_t>(m));
  if (kernel == PerformerKernel::relu) {
    for (std::int64_t f = 0; f < m; ++f) {
      double s = 0;
      for (std::int64_t c = 0; c < d; ++c) s += x[c] * p.W[f * d + c];
      phi[f] = std::max(s / std::sqrt(double(m)), 0.0) + 1e-5;
    }
    return phi;
  }
  const double scale = std::pow(double(d), -0.25);
  double diag = 0, top = -std::numeric_limits<double>::infinity();
  for (std::int64_t c = 0; c < d; ++c) diag += x[c] * scale * x[c] * scale / 2;
  for (std::int64_t f = 0; f < m; ++f) {
    double s = 0;
    for (std::int64_t c = 0; c < d; ++c) s += x[c] * scale * p.W[f * d + c];
    dash[f] = s;
    top = std::max(top, s);
  }
  double bound = 0;
  for (std::int64_t f = 0; f < m; ++f) {
    double sq = 0;
    for (std::int64_t c = 0; c < d; ++c) sq += p.W[f * d + c] * p.W[f * d + c];
    bound = std::max(bound, sq / 2);
  }
  const double shift = query ? top : causal ? bound : key_constant;
  const double beta = !query && causal ? 0.0 : 1e-5;
  for (std::int64_t f = 0; f < m; ++f) phi[f] = (std::exp(dash[f] - diag - shift) + beta) / std::sqrt(double(m));
  return phi;
}

/// out (B, H, L, e), compact, by the quadratic formula.
std::vector<double> reference_attention(const Problem& p, PerformerOptions o) {
  const Sizes n = p.n;
  std::vector<double> out(static_cast<std::size_t>(n.B * n.H * n.L * n.e));
  for (std::int64_t b = 0; b < n.B; ++b) {
    for (std::int64_t h = 0; h < n.H; ++h) {
      const std::int64_t bh = b * n.H + h;
      double c = -std::numeric_limits<double>::infinity();  // the keys' maximum of dash
      for (std::int64_t j = 0; j < n.S; ++j) {
        for (std::int64_t f = 0; f < n.m; ++f) {
          double s = 0;
          for (std::int64_t t = 0; t < n.d; ++t) {
            s += p.k[(bh * n.S + j) * n.d + t] * std::pow(double(n.d), -0.25) * p.W[f * n.d + t];
          }
          c = std::max(c, s);
        }
      }
      std::vector<std::vector<double>> phik;
      for (std::int64_t j = 0; j < n.S; ++j) {
        phik.push_back(features(&p.k[(bh * n.S + j) * n.d], p, false, o.causal, o.kernel, c));
      }
      for (std::int64_t i = 0; i < n.L; ++i) {
        const auto phiq = features(&p.q[(bh * n.L + i) * n.d], p, true, o.causal, o.kernel, c);
        std::vector<double> num(static_cast<std::size_t>(n.e), 0.0);
        double den = 0;
        for (std::int64_t j = 0; j < (o.causal ? i + 1 : n.S); ++j) {
          double a = 0;
          for (std::int64_t f = 0; f < n.m; ++f) a += phiq[f] * phik[j][f];
          a *= p.kw.empty() ? 1.0 : p.kw[b * n.S + j];
          const double w = p.vw.empty() ? 1.0 : p.vw[bh * n.S + j];
          for (std::int64_t t = 0; t < n.e; ++t) num[t] += a * w * p.v[(bh * n.S + j) * n.e + t];
          den += a;
        }
        for (std::int64_t t = 0; t < n.e; ++t) {
          out[(bh * n.L + i) * n.e + t] = num[t] / std::max(den, std::numeric_limits<double>::min());
        }
      }
    }
  }
  return out;
}

template <class T>
std::vector<T> run(const Problem& p, PerformerOptions o, std::vector<T>* q_store = nullptr) {
  const Sizes n = p.n;
  constexpr DType dt = sizeof(T) == 4 ? DType::float32 : DType::float64;
  auto q = cast<T>(p.q), k = cast<T>(p.k), v = cast<T>(p.v), W = cast<T>(p.W), kw = cast<T>(p.kw), vw = cast<T>(p.vw);
  if (q_store) *q_store = q;
  std::vector<T> out(static_cast<std::size_t>(n.B * n.H * n.L * n.e), T(-3));
  std::optional<TensorView> kwv, vwv;
  if (!kw.empty()) kwv = TensorView(kw.data(), dt, {n.B, n.S});
  if (!vw.empty()) vwv = TensorView(vw.data(), dt, {n.B, n.H, n.S});
  sketchcore::performer_attention(TensorView(q.data(), dt, {n.B, n.H, n.L, n.d}),
                                  TensorView(k.data(), dt, {n.B, n.H, n.S, n.d}),
                                  TensorView(v.data(), dt, {n.B, n.H, n.S, n.e}), TensorView(W.data(), dt, {n.m, n.d}),
                                  TensorView(out.data(), dt, {n.B, n.H, n.L, n.e}), o, kwv, vwv);
  return out;
}

using Case = std::tuple<Sizes, PerformerKernel, bool, bool>;

class PerformerCases : public ::testing::TestWithParam<Case> {};

TEST_P(PerformerCases, MatchesTheQuadraticFloat64Reference) {
  const auto [n, kernel, causal, weights] = GetParam();
  const Problem p = random_problem(n, 11, weights);
  const PerformerOptions o{kernel, causal};
  const auto expected = reference_attention(p, o);
  EXPECT_LT(relative_error(run<double>(p, o), expected), 1e-12);
  EXPECT_LT(relative_error(run<float>(p, o), expected), 2e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PerformerCases,
    ::testing::Combine(::testing::Values(Sizes{1, 1, 1, 1, 1, 1, 1}, Sizes{2, 3, 37, 37, 5, 7, 9},
                                         Sizes{1, 2, 200, 200, 16, 16, 70}, Sizes{1, 1, 129, 129, 8, 3, 33}),
                       ::testing::Values(PerformerKernel::softmax, PerformerKernel::relu), ::testing::Bool(),
                       ::testing::Bool()));

TEST(Performer, CrossAttentionWithOtherLengths) {
  const Problem p = random_problem({2, 2, 50, 300, 8, 4, 16}, 3, true);
  for (PerformerKernel kernel : {PerformerKernel::softmax, PerformerKernel::relu}) {
    EXPECT_LT(relative_error(run<double>(p, {kernel, false}), reference_attention(p, {kernel, false})), 1e-12);
  }
}

/// Σ g·out as a function of q, k, v: the backward against central differences (float64).
TEST(Performer, BackwardMatchesCentralDifferences) {
  for (bool causal : {false, true}) {
    for (PerformerKernel kernel : {PerformerKernel::softmax, PerformerKernel::relu}) {
      const Sizes n{1, 2, 7, 7, 3, 2, 5};
      Problem p = random_problem(n, 5, true);
      const PerformerOptions o{kernel, causal};
      std::mt19937_64 gen(9);
      const auto g = random_vector(n.B * n.H * n.L * n.e, gen);
      auto out = run<double>(p, o);
      std::vector<double> dq(p.q.size()), dk(p.k.size()), dv(p.v.size());
      sketchcore::PerformerGradients grads;
      grads.q = TensorView(dq.data(), DType::float64, {n.B, n.H, n.L, n.d});
      grads.k = TensorView(dk.data(), DType::float64, {n.B, n.H, n.S, n.d});
      grads.v = TensorView(dv.data(), DType::float64, {n.B, n.H, n.S, n.e});
      auto gv = g;
      sketchcore::performer_attention_backward(
          TensorView(gv.data(), DType::float64, {n.B, n.H, n.L, n.e}),
          TensorView(p.q.data(), DType::float64, {n.B, n.H, n.L, n.d}),
          TensorView(p.k.data(), DType::float64, {n.B, n.H, n.S, n.d}),
          TensorView(p.v.data(), DType::float64, {n.B, n.H, n.S, n.e}),
          TensorView(p.W.data(), DType::float64, {n.m, n.d}),
          TensorView(out.data(), DType::float64, {n.B, n.H, n.L, n.e}), o,
          TensorView(p.kw.data(), DType::float64, {n.B, n.S}), TensorView(p.vw.data(), DType::float64, {n.B, n.H, n.S}),
          grads);
      const auto loss = [&] {
        const auto y = reference_attention(p, o);
        double s = 0;
        for (std::size_t i = 0; i < y.size(); ++i) s += g[i] * y[i];
        return s;
      };
      for (auto [values, grad] : {std::pair{&p.q, &dq}, {&p.k, &dk}, {&p.v, &dv}}) {
        for (std::size_t i = 0; i < values->size(); ++i) {
          const double x = (*values)[i], h = 1e-6 * std::max(1.0, std::fabs(x));
          (*values)[i] = x + h;
          const double up = loss();
          (*values)[i] = x - h;
          const double down = loss();
          (*values)[i] = x;
          EXPECT_NEAR((*grad)[i], (up - down) / (2 * h), 1e-6 * std::max(1.0, std::fabs((*grad)[i])))
              << "causal " << causal << " kernel " << int(kernel) << " index " << i;
        }
      }
    }
  }
}

TEST(Performer, ErrorsNameTheArgumentTheExpectedAndTheActual) {
  std::vector<double> buf(4096, 0.0);
  const auto view = [&](std::vector<std::int64_t> shape, DType dt = DType::float64, std::size_t offset = 0) {
    return TensorView(buf.data() + offset, dt, std::move(shape));
  };
  std::vector<double> out(64);
  const TensorView o(out.data(), DType::float64, {1, 2, 3, 4});
  const auto message = [](auto&& call) {
    try {
      call();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([&] {
              sketchcore::performer_attention(view({2, 3, 4}), view({1, 2, 5, 4}), view({1, 2, 5, 4}), view({6, 4}), o);
            }),
            "performer_attention: q: expected a 4-D array (B, H, L, d), got shape (2, 3, 4)");
  EXPECT_EQ(message([&] {
              sketchcore::performer_attention(view({1, 2, 3, 4}), view({1, 2, 5, 4}), view({1, 2, 5, 4}),
                                              view({6, 4}), o, {PerformerKernel::softmax, true});
            }),
            "performer_attention: k: expected as many keys as queries (L = 3) for causal attention, got shape "
            "(1, 2, 5, 4)");
  EXPECT_THROW(sketchcore::performer_attention(view({1, 2, 3, 4}), view({1, 2, 5, 4}, DType::float32),
                                               view({1, 2, 5, 4}), view({6, 4}), o),
               sketchcore::dtype_error);
  EXPECT_EQ(message([&] {
              sketchcore::performer_attention(view({1, 2, 3, 4}), view({1, 2, 5, 4}, DType::float64, 100),
                                              view({1, 2, 5, 4}, DType::float64, 200),
                                              view({6, 4}, DType::float64, 300),
                                              view({1, 2, 3, 4}, DType::float64, 10));
            }),
            "performer_attention: out: expected memory disjoint from q, got an array overlapping q");
  std::vector<double> g(64);
  sketchcore::PerformerGradients grads;
  grads.q = TensorView(g.data(), DType::float64, {1, 2, 3, 4});
  grads.k = TensorView(g.data() + 8, DType::float64, {1, 2, 3, 4});
  EXPECT_EQ(message([&] {
              sketchcore::performer_attention_backward(o, view({1, 2, 3, 4}), view({1, 2, 3, 4}, DType::float64, 100),
                                                       view({1, 2, 3, 4}, DType::float64, 200),
                                                       view({6, 4}, DType::float64, 300),
                                                       view({1, 2, 3, 4}, DType::float64, 400),
                                                       {}, std::nullopt, std::nullopt, grads);
            }),
            "performer_attention_backward: grad k: expected memory disjoint from grad q, got an array overlapping "
            "grad q");
}

// --- the register-tiled products, every instruction set this CPU runs ------------------------------

using sketchcore::detail::pgemm::Band;
using sketchcore::detail::pgemm::Isa;

template <class T>
void check_products(Isa isa) {
  std::mt19937_64 gen(7);
  for (auto [m, n, k] : {std::tuple{1, 1, 1}, {6, 32, 5}, {7, 65, 3}, {130, 70, 129}, {64, 64, 64}, {13, 3, 200}}) {
    for (bool at : {false, true}) {
      for (bool bt : {false, true}) {
        for (Band band : {Band::all, Band::lower_tiles, Band::k_upto_row, Band::k_from_row}) {
          if (band == Band::lower_tiles && m != n) continue;  // a square block
          if ((band == Band::k_upto_row || band == Band::k_from_row) && m != k) continue;
          auto A = cast<T>(random_vector(m * k, gen)), B = cast<T>(random_vector(k * n, gen));
          // triangular A where the band says so
          for (int i = 0; i < m; ++i) {
            for (int p = 0; p < k; ++p) {
              const bool zero = (band == Band::k_upto_row && p > i) || (band == Band::k_from_row && p < i);
              if (zero) (at ? A[p * m + i] : A[i * k + p]) = 0;
            }
          }
          std::vector<T> C(static_cast<std::size_t>(m * n), T(1)), expected(C.size());
          for (int i = 0; i < m; ++i) {
            for (int j = 0; j < n; ++j) {
              double s = 1;  // accumulate onto the ones already there
              for (int p = 0; p < k; ++p) {
                s += double(at ? A[p * m + i] : A[i * k + p]) * double(bt ? B[j * k + p] : B[p * n + j]);
              }
              expected[i * n + j] = T(s);
            }
          }
          sketchcore::detail::pgemm::Workspace<T> ws(isa);
          sketchcore::detail::pgemm::multiply<T>(m, n, k, {A.data(), at ? m : k, at}, {B.data(), bt ? k : n, bt},
                                                 C.data(), n, true, ws, band);
          for (int i = 0; i < m; ++i) {
            for (int j = 0; j < n; ++j) {
              if (band == Band::lower_tiles && j > i) continue;  // may be left unwritten
              EXPECT_NEAR(double(C[i * n + j]), double(expected[i * n + j]), (sizeof(T) == 4 ? 1e-4 : 1e-12) * (1 + k))
                  << "isa " << int(isa) << " " << m << "x" << n << "x" << k << " at " << at << " bt " << bt
                  << " band " << int(band);
            }
          }
        }
      }
    }
  }
}

TEST(PerformerProducts, EveryInstructionSetMatchesATripleLoop) {
  for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512}) {
    if (static_cast<int>(isa) > static_cast<int>(sketchcore::detail::pgemm::best_isa())) continue;
    check_products<float>(isa);
    check_products<double>(isa);
  }
}

}  // namespace
