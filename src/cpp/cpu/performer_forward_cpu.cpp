// Performer attention on the CPU, forward (cpu/performer_cpu.hpp has the notation).
//
// Non-causal, per head: the keys, split into parts of consecutive blocks, are reduced to one
// state per part, A = Σ_j a_j·g_j ⊗ w_j·v_j and Aden = Σ_j a_j·g_j (m × e and m), with the sums
// B = Σ_j a_j·w_j·v_j and Bden = Σ_j a_j that carry β (a = key_weights, w = value_weights). For
// softmax keys g_j = exp(dash_j − diag_j − c) with c the running maximum of dash: when a block
// raises it, A and Aden are rescaled by exp(c_old − c_new), so one pass over the keys suffices.
// The parts merge into S = α·(A + β·1 ⊗ B), S_den = α·(Aden + β·Bden) (the sum over all keys of
// φ(k_j) ⊗ [w_j v_j, 1] with the head's final c), and each block of queries computes
// out = φ(Q)·S / max(φ(Q)·S_den, tiny) while its features are in cache.
//
// The block sums join the running sums through Kahan's compensation, so a sum over millions of keys
// in float32 is as accurate as one over a few blocks. Causal: cpu/performer_causal_cpu.cpp.
//
// Threads: parallel_for over (head, key part) and (head, query block), or over heads when causal;
// the parts depend only on the shapes, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "cpu/cpu_ops.hpp"
#include "cpu/performer_cpu.hpp"
#include "cpu/performer_passes.hpp"
#include "detail/parallel.hpp"

namespace sketchcore::detail {

namespace performer {

template <class T>
KeyPasses<T>::KeyPasses(const PerformerProblem& p, const FeatureMap<T>& map)
    : p_(p), map_(map), heads_(p.batch * p.heads), parts_(key_parts(p.keys)),
      part_len_(parts_ > 0 ? (p.keys + parts_ - 1) / parts_ : 0), m_(p.num_features), e_(p.value_dim),
      partial_size_(m_ * e_ + m_ + e_ + 2) {
  part_len_ = (part_len_ + kBlock - 1) / kBlock * kBlock;  // whole blocks
  partial_.allocate(heads_ * parts_ * partial_size_);
  state_.allocate(heads_ * (m_ * e_ + m_));
  c_.assign(static_cast<std::size_t>(heads_), T(0));
}

template <class T>
std::int64_t KeyPasses<T>::key_parts(std::int64_t keys) {
  const std::int64_t parts = (keys + kKeysPerPart - 1) / kKeysPerPart;
  return std::clamp<std::int64_t>(parts, 1, kMaxParts);
}

template <class T>
void KeyPasses<T>::reduce() {
  parallel_for(heads_ * parts_, 1, [&](std::int64_t begin, std::int64_t end) {
    BlockBuffers<T> buffers(map_.wt.isa());
    for (std::int64_t item = begin; item < end; ++item) reduce_part(item / parts_, item % parts_, buffers);
  });
  parallel_for(heads_, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t bh = begin; bh < end; ++bh) merge(bh);
  });
}

template <class T>
void KeyPasses<T>::reduce_part(std::int64_t bh, std::int64_t part, BlockBuffers<T>& buf) {
  const std::int64_t b = bh / p_.heads, h = bh % p_.heads, m = m_, e = e_, d = map_.d;
  const std::int64_t sums = m * e + m + e + 1;  // A, Aden, Bv, Bden
  T* A = partial_.data() + (bh * parts_ + part) * partial_size_;
  T& c = A[sums];
  std::fill(A, A + partial_size_, T(0));
  c = map_.softmax ? -std::numeric_limits<T>::infinity() : T(0);
  // Each block's sums are formed apart and join A with compensation (compensated_add).
  std::vector<T> comp(static_cast<std::size_t>(sums), T(0)), block(static_cast<std::size_t>(sums));
  const Rows k = slice(p_.k, b, h);
  const std::int64_t s0 = part * part_len_, s1 = std::min(p_.keys, s0 + part_len_);
  buf.reserve(kBlock, d, m, e);
  for (std::int64_t j0 = s0; j0 < s1; j0 += kBlock) {
    const std::int64_t n = std::min(kBlock, s1 - j0);
    dash_of_rows(map_, k, j0, n, buf.x(), buf.f(), buf.ws);
    const T* a = read_weights(p_.key_weights, b, 0, j0, n, buf.rows_b());
    read_values(p_, b, h, j0, n, buf);
    if (map_.softmax) {
      half_square_norms(n, d, buf.x(), buf.rows_a());
      const T top = block_max(n, m, buf.f());
      if (top > c) {
        if (c != -std::numeric_limits<T>::infinity()) {
          const T shrink = std::exp(c - top);
          for (std::int64_t i = 0; i < m * e + m; ++i) {
            A[i] *= shrink;
            comp[static_cast<std::size_t>(i)] *= shrink;
          }
        }
        c = top;
      }
      exp_shifted(n, m, buf.f(), buf.rows_a(), static_cast<const T*>(nullptr), c, buf.f());
    } else {
      relu_scaled(n, m, buf.f(), map_.inv_sqrt_m, buf.f());
    }
    if (a) affine(n, m, buf.f(), T(1), T(0), a, buf.f());
    T* blk = block.data();
    pgemm::multiply<T>(m, e, n, {buf.f(), m, true}, {buf.v(), e}, blk, e, false, buf.ws);
    col_sums(n, m, buf.f(), static_cast<const T*>(nullptr), blk + m * e, false);
    col_sums(n, e, buf.v(), a, blk + m * e + m, false);
    T count = 0;
    for (std::int64_t i = 0; i < n; ++i) count += a ? a[i] : T(1);
    blk[sums - 1] = count;
    compensated_add(sums, blk, A, comp.data());
  }
}

template <class T>
void KeyPasses<T>::merge(std::int64_t bh) {
  const std::int64_t m = m_, e = e_;
  T* S = state_.data() + bh * (m * e + m);
  T* Sden = S + m * e;
  T c = map_.softmax ? -std::numeric_limits<T>::infinity() : T(0);
  for (std::int64_t part = 0; part < parts_; ++part) {
    c = std::max(c, partial_.data()[(bh * parts_ + part) * partial_size_ + m * e + m + e + 1]);
  }
  std::fill(S, S + m * e + m, T(0));
  T Bden = 0;
  std::vector<T> Bv(static_cast<std::size_t>(e), T(0));
  for (std::int64_t part = 0; part < parts_; ++part) {
    const T* A = partial_.data() + (bh * parts_ + part) * partial_size_;
    const T cp = A[m * e + m + e + 1];
    const T scale = map_.softmax ? (cp == -std::numeric_limits<T>::infinity() ? T(0) : std::exp(cp - c)) : T(1);
    if (parts_ == 1) {
      std::copy(A, A + m * e + m, S);
    } else {
      for (std::int64_t i = 0; i < m * e + m; ++i) S[i] += scale * A[i];
    }
    for (std::int64_t j = 0; j < e; ++j) Bv[j] += A[m * e + m + j];
    Bden += A[m * e + m + e];
  }
  c_[static_cast<std::size_t>(bh)] = c;
  const T alpha = map_.alpha_k, beta = map_.beta_k;
  for (std::int64_t f = 0; f < m; ++f) {
    for (std::int64_t j = 0; j < e; ++j) S[f * e + j] = alpha * (S[f * e + j] + beta * Bv[j]);
    Sden[f] = alpha * (Sden[f] + beta * Bden);
  }
}

template <class T>
const T* read_weights(const TensorView* weights, std::int64_t b, std::int64_t h, std::int64_t row0, std::int64_t n,
                      T* dst) {
  if (!weights) return nullptr;
  read_rows<T>(slice(*weights, b, h), row0, n, 1, T(1), dst, 1);
  return dst;
}

template <class T>
void read_values(const PerformerProblem& p, std::int64_t b, std::int64_t h, std::int64_t j0, std::int64_t n,
                 BlockBuffers<T>& buf) {
  const std::int64_t e = p.value_dim;
  read_rows<T>(slice(p.v, b, h), j0, n, e, T(1), buf.v(), e);
  if (const T* w = read_weights(p.value_weights, b, h, j0, n, buf.rows_d())) {
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t c = 0; c < e; ++c) buf.v()[i * e + c] *= w[i];
    }
  }
}

template <class T>
void query_features(const FeatureMap<T>& map, std::int64_t n, const T* dash, T* g, T* phi, const T* x, T* diag,
                    T* top) {
  if (map.softmax) {
    half_square_norms(n, map.d, x, diag);
    row_max(n, map.m, dash, top);
    exp_shifted(n, map.m, dash, diag, top, T(0), g);
  } else {
    relu_scaled(n, map.m, dash, map.inv_sqrt_m, g);
  }
  affine(n, map.m, g, map.alpha_q, map.beta_q, static_cast<const T*>(nullptr), phi);
}

template <class T>
void divide_rows(std::int64_t n, std::int64_t e, T* o, const T* z) {
  const T tiny = std::numeric_limits<T>::min();
  for (std::int64_t i = 0; i < n; ++i) {
    const T zc = std::max(z[i], tiny);
    for (std::int64_t c = 0; c < e; ++c) o[i * e + c] /= zc;
  }
}

template <class T>
void mask_upper(std::int64_t n, T* P) {
  for (std::int64_t i = 0; i < n; ++i) std::fill(P + i * n + i + 1, P + (i + 1) * n, T(0));
}

namespace {

template <class T>
void noncausal_forward(const PerformerProblem& p) {
  const FeatureMap<T> map(p, pgemm::best_isa());
  KeyPasses<T> keys(p, map);
  keys.reduce();
  const std::int64_t heads = p.batch * p.heads, m = p.num_features, e = p.value_dim, d = p.dim;
  const std::int64_t blocks = (p.queries + kBlock - 1) / kBlock;
  std::vector<pgemm::PackedB<T>> packed = packed_operands<T>(heads, map.wt.isa());
  parallel_for(heads, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t bh = begin; bh < end; ++bh) packed[static_cast<std::size_t>(bh)].pack(m, e, {keys.state(bh), e});
  });
  parallel_for(heads * blocks, 1, [&](std::int64_t begin, std::int64_t end) {
    BlockBuffers<T> buf(map.wt.isa());
    buf.reserve(kBlock, d, m, e);
    for (std::int64_t item = begin; item < end; ++item) {
      const std::int64_t bh = item / blocks, i0 = (item % blocks) * kBlock, n = std::min(kBlock, p.queries - i0);
      const std::int64_t b = bh / p.heads, h = bh % p.heads;
      dash_of_rows(map, slice(p.q, b, h), i0, n, buf.x(), buf.f(), buf.ws);
      query_features(map, n, buf.f(), buf.f(), buf.f(), buf.x(), buf.rows_a(), buf.rows_b());
      pgemm::multiply<T>(n, {buf.f(), m}, packed[static_cast<std::size_t>(bh)], buf.o(), e, false, buf.ws);
      row_dots(n, m, buf.f(), keys.state(bh) + m * e, buf.rows_c());
      divide_rows(n, e, buf.o(), buf.rows_c());
      write_rows<T>(buf.o(), e, n, e, T(1), slice(p.out, b, h), i0);
    }
  });
}

template <class T>
void forward(const PerformerProblem& p) {
  if (p.batch * p.heads == 0 || p.queries == 0 || p.value_dim == 0) return;
  if (p.options.causal) {
    causal_forward<T>(p);
  } else {
    noncausal_forward<T>(p);
  }
}

}  // namespace

template <class T>
void BlockBuffers<T>::reserve(std::int64_t rows, std::int64_t d, std::int64_t m, std::int64_t e) {
  if (rows <= capacity_[0] && d <= capacity_[1] && m <= capacity_[2] && e <= capacity_[3]) return;
  rows = std::max(rows, capacity_[0]);
  d = std::max(d, capacity_[1]);
  m = std::max(m, capacity_[2]);
  e = std::max(e, capacity_[3]);
  for (Scratch<T>* s : {&x_, &dx_}) s->allocate(rows * d);
  for (Scratch<T>* s : {&f_, &f2_, &g_, &g2_, &h_}) s->allocate(rows * m);
  for (Scratch<T>* s : {&v_, &o_, &o2_}) s->allocate(rows * std::max<std::int64_t>(e, 1));
  for (Scratch<T>* s : {&ra_, &rb_, &rc_, &rd_, &re_, &rf_}) s->allocate(rows);
  for (Scratch<T>* s : {&p_, &dp_}) s->allocate(rows * rows);
  capacity_[0] = rows;
  capacity_[1] = d;
  capacity_[2] = m;
  capacity_[3] = e;
}

#define SKETCHCORE_PERFORMER_PASSES(T)                                                                           \
  template class KeyPasses<T>;                                                                                  \
  template struct BlockBuffers<T>;                                                                              \
  template const T* read_weights<T>(const TensorView*, std::int64_t, std::int64_t, std::int64_t, std::int64_t, T*); \
  template void read_values<T>(const PerformerProblem&, std::int64_t, std::int64_t, std::int64_t, std::int64_t,  \
                               BlockBuffers<T>&);                                                               \
  template void query_features<T>(const FeatureMap<T>&, std::int64_t, const T*, T*, T*, const T*, T*, T*);     \
  template void divide_rows<T>(std::int64_t, std::int64_t, T*, const T*);                                        \
  template void mask_upper<T>(std::int64_t, T*);

SKETCHCORE_PERFORMER_PASSES(float)
SKETCHCORE_PERFORMER_PASSES(double)

}  // namespace performer

void cpu_performer_attention(const PerformerProblem& p) {
  if (p.q.dtype() == DType::float64) {
    performer::forward<double>(p);
  } else {
    performer::forward<float>(p);
  }
}

}  // namespace sketchcore::detail
