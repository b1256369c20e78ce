// Performer attention on the CPU, backward (notation: cpu/performer_cpu.hpp). With n_i the
// numerator, z_i = φ(q_i)·S_den the normaliser and out_i = n_i / max(z_i, tiny):
//   dn_i = dout_i / z_i,  dz_i = −(dout_i·out_i) / z_i where z_i ≥ tiny, else 0 (output_gradients),
//   dφ(q_i) = dn_i·Sᵀ + dz_i·S_den  (S, S_den over the keys j ≤ i when causal),
//   dS = Σ_i φ(q_i) ⊗ dn_i,  dS_den = Σ_i dz_i·φ(q_i)  (over i ≥ j when causal),
//   dφ'(k_j) = dS·(w_j v_j) + dS_den,  d(w_j v_j) = φ'(k_j)·dS,  dφ(k_j) = a_j·dφ'(k_j),
// and through the feature map (φ = α(g + β)): softmax t = α·dφ·g, dx' = Σ_f t_f W_f −
// (Σ_f t_f)·x' + (the shift's gradient −Σ_f t_f, on the maximum's entries, split evenly among
// ties, as torch's amax backward does), dx = x_scale·dx'; relu dx = (α·dφ·[g > 0]·m^(−1/2))·W.
//
// Non-causal: the key states are recomputed (KeyPasses), one pass over the query blocks forms dq
// and dS (partial sums per part of the queries), one pass over the key blocks forms dk and dv,
// and the gradient of the keys' constant c goes to its tied entries at the end. Causal:
// cpu/performer_causal_backward_cpu.cpp. Features are recomputed in every pass; nothing of size
// L × m is stored.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "cpu/cpu_ops.hpp"
#include "cpu/performer_cpu.hpp"
#include "cpu/performer_passes.hpp"
#include "detail/parallel.hpp"

namespace sketchcore::detail {

namespace performer {

/// dz = −(dout·out)/z into dz and dn = dout/z into `go` (in place), both 0 where z < tiny.
///
/// Where z < tiny the output is clamped: out = n/tiny, and z = 0 means every φ(q_i)·φ'(k_j) is 0
/// (features are positive), so n = 0 and no input moves out_i (keys there have a = 0 or
/// features that underflowed). torch's autograd of the reference formula forms dout/tiny there
/// (~1e38 in float32), whose products with the zero features overflow to inf·0 = NaN (a causal
/// prefix of padded keys made every gradient NaN); 0 is the derivative.
template <class T>
void output_gradients(std::int64_t n, std::int64_t e, const T* z, const T* out, T* go, T* dz) {
  const T tiny = std::numeric_limits<T>::min();
  for (std::int64_t i = 0; i < n; ++i) {
    T s = 0;
    for (std::int64_t c = 0; c < e; ++c) s += go[i * e + c] * out[i * e + c];
    const bool kept = z[i] >= tiny;
    dz[i] = kept ? -s / z[i] : T(0);
    for (std::int64_t c = 0; c < e; ++c) go[i * e + c] = kept ? go[i * e + c] / z[i] : T(0);
  }
}

/// Rows of a row-major block scaled by per-row weights (in place); w null: nothing.
template <class T>
void scale_rows(std::int64_t n, std::int64_t cols, const T* w, T* a) {
  if (!w) return;
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t c = 0; c < cols; ++c) a[i * cols + c] *= w[i];
  }
}

/// The gradient of a block's rows x from dφ in `dphi` (consumed): into buf.dx() (unscaled dx').
/// Softmax: `g` the exponentials, `dash`/`top` for the query maxima's ties (top null: keys, whose
/// shift's gradient the caller handles); returns −Σ t (the shift's gradient). Relu: `g` the relu
/// values.
template <class T>
T features_backward(const FeatureMap<T>& map, std::int64_t n, const T* x, const T* g, T alpha, T* dphi,
                    const T* dash, const T* top, BlockBuffers<T>& buf, std::vector<std::int64_t>& hits) {
  const std::int64_t m = map.m, d = map.d;
  if (!map.softmax) {
    relu_grad(n, m, g, alpha * map.inv_sqrt_m, dphi);
    pgemm::multiply<T>(n, {dphi, m}, map.w, buf.dx(), d, false, buf.ws);
    return T(0);
  }
  T* sums = buf.rows_f();
  softmax_grad(n, m, g, alpha, dphi, sums);
  pgemm::multiply<T>(n, {dphi, m}, map.w, buf.dx(), d, false, buf.ws);
  sub_scaled_rows(n, d, sums, x, buf.dx());
  T total = 0;
  for (std::int64_t i = 0; i < n; ++i) total += sums[i];
  if (top) {  // each query's maximum: −sums[i] split among the row's tied entries
    hits.clear();
    find_equal(n, m, dash, top, T(0), hits);
    std::size_t first = 0;
    while (first < hits.size()) {
      const std::int64_t i = hits[first] / m;
      std::size_t last = first;
      while (last < hits.size() && hits[last] / m == i) ++last;
      const T share = -sums[i] / static_cast<T>(last - first);
      for (std::size_t h = first; h < last; ++h) {
        const T* wf = map.w_rows.data() + (hits[h] % m) * d;
        for (std::int64_t c = 0; c < d; ++c) buf.dx()[i * d + c] += share * wf[c];
      }
      first = last;
    }
  }
  return -total;
}

namespace {

template <class T>
class NonCausalBackward {
 public:
  NonCausalBackward(const PerformerProblem& p, const TensorView& grad_out, const PerformerGradients& g)
      : p_(p), grad_out_(grad_out), g_(g), map_(p, pgemm::best_isa()), keys_(p, map_), heads_(p.batch * p.heads),
        m_(p.num_features), e_(p.value_dim), d_(p.dim) {}

  void run() {
    keys_.reduce();
    const bool key_side = g_.k || g_.v;
    qparts_ = KeyPasses<T>::key_parts(p_.queries);
    qpart_len_ = ((p_.queries + qparts_ - 1) / qparts_ + kBlock - 1) / kBlock * kBlock;
    const std::int64_t size = m_ * e_ + m_;
    if (key_side) dS_.allocate(heads_ * qparts_ * size);
    std::vector<pgemm::PackedB<T>> state_t = packed_operands<T>(heads_, map_.wt.isa());
    // 16-bit problems recompute out from S in float32 (state) instead of reading the rounded forward
    // output, whose rounding the gradient would amplify (dq 2e-2 off in bfloat16 at head dim 256).
    const bool recompute_out = p_.q.dtype() == DType::float16 || p_.q.dtype() == DType::bfloat16;
    if (recompute_out) state_ = packed_operands<T>(heads_, map_.wt.isa());
    parallel_for(heads_, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t bh = begin; bh < end; ++bh) {
        state_t[static_cast<std::size_t>(bh)].pack(e_, m_, {keys_.state(bh), e_, true});
        if (recompute_out) state_[static_cast<std::size_t>(bh)].pack(m_, e_, {keys_.state(bh), e_});
      }
    });
    parallel_for(heads_ * qparts_, 1, [&](std::int64_t begin, std::int64_t end) {
      BlockBuffers<T> buf(map_.wt.isa());
      buf.reserve(kBlock, d_, m_, e_);
      std::vector<std::int64_t> hits;
      for (std::int64_t item = begin; item < end; ++item) {
        const std::int64_t bh = item / qparts_;
        query_part(bh, item % qparts_, state_t[static_cast<std::size_t>(bh)], buf, hits, key_side);
      }
    });
    if (!key_side) return;
    // dS of each head: the sum of its parts, packed for the key pass (dS and dSᵀ).
    std::vector<pgemm::PackedB<T>> ds = packed_operands<T>(heads_, map_.wt.isa());
    std::vector<pgemm::PackedB<T>> ds_t = packed_operands<T>(heads_, map_.wt.isa());
    parallel_for(heads_, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t bh = begin; bh < end; ++bh) {
        T* total = dS_.data() + bh * qparts_ * size;
        for (std::int64_t part = 1; part < qparts_; ++part) {
          const T* other = total + part * size;
          for (std::int64_t i = 0; i < size; ++i) total[i] += other[i];
        }
        ds[static_cast<std::size_t>(bh)].pack(m_, e_, {total, e_});
        ds_t[static_cast<std::size_t>(bh)].pack(e_, m_, {total, e_, true});
      }
    });
    const std::int64_t kparts = keys_.parts();
    std::vector<T> dc(static_cast<std::size_t>(heads_ * kparts), T(0));
    std::vector<std::vector<std::int64_t>> ties(static_cast<std::size_t>(heads_ * kparts));
    parallel_for(heads_ * kparts, 1, [&](std::int64_t begin, std::int64_t end) {
      BlockBuffers<T> buf(map_.wt.isa());
      buf.reserve(kBlock, d_, m_, e_);
      std::vector<std::int64_t> hits;
      for (std::int64_t item = begin; item < end; ++item) {
        const std::int64_t bh = item / kparts;
        key_part(bh, item % kparts, ds[static_cast<std::size_t>(bh)], ds_t[static_cast<std::size_t>(bh)], buf,
                 dc[static_cast<std::size_t>(item)], ties[static_cast<std::size_t>(item)]);
      }
    });
    if (g_.k && map_.softmax) distribute_constant_gradient(dc, ties);
  }

 private:
  void query_part(std::int64_t bh, std::int64_t part, const pgemm::PackedB<T>& state_t, BlockBuffers<T>& buf,
                  std::vector<std::int64_t>& hits, bool key_side) {
    const std::int64_t b = bh / p_.heads, h = bh % p_.heads, m = m_, e = e_, d = d_;
    const T* Sden = keys_.state(bh) + m * e;
    T* dS = key_side ? dS_.data() + (bh * qparts_ + part) * (m * e + m) : nullptr;
    if (dS) std::fill(dS, dS + m * e + m, T(0));
    const std::int64_t i_begin = part * qpart_len_, i_end = std::min(p_.queries, i_begin + qpart_len_);
    const Rows q = slice(p_.q, b, h);
    for (std::int64_t i0 = i_begin; i0 < i_end; i0 += kBlock) {
      const std::int64_t n = std::min(kBlock, i_end - i0);
      T *dash = buf.g2(), *g = buf.g(), *phi = buf.f(), *dphi = buf.h(), *z = buf.rows_c(), *dz = buf.rows_d();
      dash_of_rows(map_, q, i0, n, buf.x(), dash, buf.ws);
      query_features(map_, n, dash, g, phi, buf.x(), buf.rows_a(), buf.rows_b());
      row_dots(n, m, phi, Sden, z);
      read_rows<T>(slice(grad_out_, b, h), i0, n, e, T(1), buf.o(), e);
      if (state_.empty()) {
        read_rows<T>(slice(p_.out, b, h), i0, n, e, T(1), buf.o2(), e);
      } else {
        pgemm::multiply<T>(n, {phi, m}, state_[static_cast<std::size_t>(bh)], buf.o2(), e, false, buf.ws);
        divide_rows(n, e, buf.o2(), z);
      }
      output_gradients(n, e, z, buf.o2(), buf.o(), dz);  // buf.o() := dn
      if (dS) {
        pgemm::multiply<T>(m, e, n, {phi, m, true}, {buf.o(), e}, dS, e, true, buf.ws);
        col_sums(n, m, phi, dz, dS + m * e, true);
      }
      if (!g_.q) continue;
      pgemm::multiply<T>(n, {buf.o(), e}, state_t, dphi, m, false, buf.ws);
      add_outer(n, m, dz, Sden, dphi);
      features_backward(map_, n, buf.x(), g, map_.alpha_q, dphi, dash, buf.rows_b(), buf, hits);
      write_rows<T>(buf.dx(), d, n, d, map_.x_scale, slice(*g_.q, b, h), i0);
    }
  }

  void key_part(std::int64_t bh, std::int64_t part, const pgemm::PackedB<T>& ds, const pgemm::PackedB<T>& ds_t,
                BlockBuffers<T>& buf, T& dc, std::vector<std::int64_t>& ties) {
    const std::int64_t b = bh / p_.heads, h = bh % p_.heads, m = m_, e = e_, d = d_;
    const T* dSden = dS_.data() + bh * qparts_ * (m * e + m) + m * e;
    const T c = keys_.constant(bh);
    const std::int64_t len = keys_.part_length();
    const std::int64_t j_begin = part * len, j_end = std::min(p_.keys, j_begin + len);
    const Rows k = slice(p_.k, b, h);
    for (std::int64_t j0 = j_begin; j0 < j_end; j0 += kBlock) {
      const std::int64_t n = std::min(kBlock, j_end - j0);
      T *dash = buf.g2(), *g = buf.g(), *phi = buf.f(), *dphi = buf.h();
      dash_of_rows(map_, k, j0, n, buf.x(), dash, buf.ws);
      const T* a = read_weights(p_.key_weights, b, 0, j0, n, buf.rows_b());
      read_values(p_, b, h, j0, n, buf);
      if (map_.softmax) {
        half_square_norms(n, d, buf.x(), buf.rows_a());
        exp_shifted(n, m, dash, buf.rows_a(), static_cast<const T*>(nullptr), c, g);
      } else {
        relu_scaled(n, m, dash, map_.inv_sqrt_m, g);
      }
      if (g_.v) {  // d(w v) = φ'·dS, dv = w·d(w v)
        affine(n, m, g, map_.alpha_k, map_.beta_k, a, phi);
        pgemm::multiply<T>(n, {phi, m}, ds, buf.o(), e, false, buf.ws);
        const T* w = p_.value_weights ? buf.rows_d() : nullptr;
        scale_rows(n, e, w, buf.o());
        write_rows<T>(buf.o(), e, n, e, T(1), slice(*g_.v, b, h), j0);
      }
      if (!g_.k) continue;
      pgemm::multiply<T>(n, {buf.v(), e}, ds_t, dphi, m, false, buf.ws);
      add_outer(n, m, static_cast<const T*>(nullptr), dSden, dphi);
      scale_rows(n, m, a, dphi);
      dc += features_backward(map_, n, buf.x(), g, map_.alpha_k, dphi, dash, static_cast<const T*>(nullptr), buf,
                              ties);
      if (map_.softmax) {  // where dash reaches c: the maximum's entries
        const std::size_t before = ties.size();
        find_equal(n, m, dash, static_cast<const T*>(nullptr), c, ties);
        for (std::size_t t = before; t < ties.size(); ++t) ties[t] += j0 * m;
      }
      write_rows<T>(buf.dx(), d, n, d, map_.x_scale, slice(*g_.k, b, h), j0);
    }
  }

  /// c = max over a head's keys and features of dash: its gradient Σ parts, split evenly among
  /// the tied entries (j, f), each adding share·W_f to dk_j (times x_scale).
  void distribute_constant_gradient(const std::vector<T>& dc, const std::vector<std::vector<std::int64_t>>& ties) {
    const std::int64_t kparts = keys_.parts(), m = m_, d = d_;
    std::vector<T> row(static_cast<std::size_t>(d));
    for (std::int64_t bh = 0; bh < heads_; ++bh) {
      T total = 0;
      std::size_t count = 0;
      for (std::int64_t part = 0; part < kparts; ++part) {
        total += dc[static_cast<std::size_t>(bh * kparts + part)];
        count += ties[static_cast<std::size_t>(bh * kparts + part)].size();
      }
      if (count == 0) continue;
      const T share = total / static_cast<T>(count);
      const Rows dk = slice(*g_.k, bh / p_.heads, bh % p_.heads);
      for (std::int64_t part = 0; part < kparts; ++part) {
        for (std::int64_t hit : ties[static_cast<std::size_t>(bh * kparts + part)]) {
          const T* wf = map_.w_rows.data() + (hit % m) * d;
          for (std::int64_t c = 0; c < d; ++c) row[static_cast<std::size_t>(c)] = share * wf[c];
          write_rows<T>(row.data(), d, 1, d, map_.x_scale, dk, hit / m, /*add=*/true);
        }
      }
    }
  }

  const PerformerProblem& p_;
  const TensorView& grad_out_;
  const PerformerGradients& g_;
  const FeatureMap<T> map_;
  KeyPasses<T> keys_;
  const std::int64_t heads_, m_, e_, d_;
  std::int64_t qparts_ = 1, qpart_len_ = 0;
  Scratch<T> dS_;  // per (head, query part): dS (m × e) then dS_den (m)
  std::vector<pgemm::PackedB<T>> state_;  // 16-bit: each head's S packed, to recompute out
};

template <class T>
void backward(const PerformerProblem& p, const TensorView& grad_out, const PerformerGradients& grads) {
  const auto zero = [](const std::optional<TensorView>& t) {
    if (!t || t->numel() == 0) return;
    const std::int64_t B = t->size(0), H = t->size(1), rows = t->size(2), cols = t->size(3);
    std::vector<T> zeros(static_cast<std::size_t>(cols), T(0));
    for (std::int64_t b = 0; b < B; ++b) {
      for (std::int64_t h = 0; h < H; ++h) {
        const Rows r = slice(*t, b, h);
        for (std::int64_t i = 0; i < rows; ++i) write_rows<T>(zeros.data(), cols, 1, cols, T(1), r, i);
      }
    }
  };
  if (p.batch * p.heads == 0) return;
  if (p.queries == 0 || p.keys == 0 || p.value_dim == 0) {  // nothing flows back
    zero(grads.q);
    zero(grads.k);
    zero(grads.v);
    return;
  }
  if (p.options.causal) {
    causal_backward<T>(p, grad_out, grads);
  } else {
    NonCausalBackward<T>(p, grad_out, grads).run();
  }
}

}  // namespace

#define SKETCHCORE_PERFORMER_GRADS(T)                                                                            \
  template void output_gradients<T>(std::int64_t, std::int64_t, const T*, const T*, T*, T*);                     \
  template void scale_rows<T>(std::int64_t, std::int64_t, const T*, T*);                                         \
  template T features_backward<T>(const FeatureMap<T>&, std::int64_t, const T*, const T*, T, T*, const T*,       \
                                  const T*, BlockBuffers<T>&, std::vector<std::int64_t>&);

SKETCHCORE_PERFORMER_GRADS(float)
SKETCHCORE_PERFORMER_GRADS(double)

}  // namespace performer

void cpu_performer_attention_backward(const PerformerProblem& p, const TensorView& grad_out,
                                      const PerformerGradients& grads) {
  if (p.q.dtype() == DType::float64) {
    performer::backward<double>(p, grad_out, grads);
  } else {
    performer::backward<float>(p, grad_out, grads);
  }
}

}  // namespace sketchcore::detail
