// Performer attention on the CPU, causal backward (the formulas: cpu/performer_backward_cpu.cpp).
// Per head and part of its chunks (CausalParts): a forward-direction pass from the state before
// the part (the forward's S) forms z, dq and keeps dn, dz (L × (e + 1) per head); the sums
// R = Σ_i φ(q_i) ⊗ dn_i of the parts after each part (their suffix sums); a reverse pass from them
// forms dk and dv:
//   d(w v_j) = φ'(k_j)·R + Σ_{i ≥ j in the chunk} P_ij dn_i,
//   dφ'(k_j) = R·(w v_j) + R_den + Σ_{i ≥ j in the chunk} dP_ij φ(q_i),  dP_ij = dn_i·(w v_j) + dz_i.
// Spans (cpu/performer_passes.hpp): the forward-direction pass finds them as the forward does and
// records them, with each span's constant c; the reverse pass walks them back. dn_i, dz_i are kept
// with the constant of i's span; a key j of an earlier span with constant c_j ≤ c_i needs them with
// its own, dn_i·exp(c_j − c_i), so the sums R are rescaled by exp(c_earlier − c_later) ≤ 1 on the
// way back. The constants are gradient-free: every query's output is the same for any constant its
// keys share, so their gradient is zero. 16-bit problems recompute out in float32 instead of
// reading the rounded forward output (whose rounding error the gradient would amplify).
#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdint>
#include <utility>
#include <vector>

#include "cpu/performer_cpu.hpp"
#include "cpu/performer_passes.hpp"
#include "detail/parallel.hpp"

namespace sketchcore::detail::performer {

namespace {

/// The constant and length of every span of one (head, part), in order.
template <class T>
using Spans = std::vector<CausalSpan<T>>;

/// a[i] *= factor for i < size (and comp when not null).
template <class T>
void scale_all(std::int64_t size, T factor, T* a, T* comp) {
  for (std::int64_t i = 0; i < size; ++i) a[i] *= factor;
  if (comp) {
    for (std::int64_t i = 0; i < size; ++i) comp[i] *= factor;
  }
}

/// R = Σ_i φ(q_i) ⊗ dn_i·exp(c_ref − c_i) and R_den likewise with dz_i, over the spans of one part,
/// zeroed first; c_ref is the first span's constant (returned; +inf for none). Keyless spans are
/// skipped: their dn and dz are 0.
template <class T>
T query_sums(const PerformerProblem& p, const FeatureMap<T>& map, std::int64_t b, std::int64_t h,
             const Spans<T>& spans, const T* Dn, const T* Dz, BlockBuffers<T>& buf, T* R) {
  const std::int64_t m = p.num_features, e = p.value_dim, size = m * e + m;
  std::vector<T> comp(static_cast<std::size_t>(size), T(0)), block(static_cast<std::size_t>(size));
  std::fill(R, R + size, T(0));
  const auto first = std::find_if(spans.begin(), spans.end(), [](const CausalSpan<T>& s) { return !s.keyless; });
  if (first == spans.end()) return std::numeric_limits<T>::infinity();
  const T c_ref = first->c;
  const Rows q = slice(p.q, b, h);
  for (auto span = first; span != spans.end(); ++span) {
    const std::int64_t i0 = span->t0, n = span->n;
    T* fq = buf.f();
    dash_of_rows(map, q, i0, n, buf.x(), fq, buf.ws);
    query_features(map, n, fq, fq, fq, buf.x(), buf.rows_a(), buf.rows_b());
    if (span->c != c_ref) scale_all(n * m, std::exp(c_ref - span->c), fq, static_cast<T*>(nullptr));
    pgemm::multiply<T>(m, e, n, {fq, m, true}, {Dn + i0 * e, e}, block.data(), e, false, buf.ws);
    col_sums(n, m, fq, Dz + i0, block.data() + m * e, false);
    compensated_add(size, block.data(), R, comp.data());
  }
  return c_ref;
}

/// The keys of a span: dash into `dash`, x' into buf.x(), |k'|²/2 into `diag` (softmax).
template <class T>
void key_dash(const FeatureMap<T>& map, const Rows& k, std::int64_t t0, std::int64_t n, T* dash, T* diag,
              BlockBuffers<T>& buf) {
  dash_of_rows(map, k, t0, n, buf.x(), dash, buf.ws);
  if (map.softmax) half_square_norms(n, map.d, buf.x(), diag);
}

/// P = φ(Q)·φ'(K)ᵀ masked to j ≤ i, and z += its row sums.
template <class T>
void masked_scores(std::int64_t n, std::int64_t m, const T* fq, const T* fk, T* P, T* z, BlockBuffers<T>& buf) {
  pgemm::multiply<T>(n, n, m, {fq, m}, {fk, m, true}, P, n, false, buf.ws, pgemm::Band::lower_tiles);
  mask_upper(n, P);
  if (!z) return;
  for (std::int64_t i = 0; i < n; ++i) {
    T s = 0;
    for (std::int64_t j = 0; j <= i; ++j) s += P[i * n + j];
    z[i] += s;
  }
}

/// dP = dn·V'ᵀ + dz (j ≤ i), masked.
template <class T>
void score_gradients(std::int64_t n, std::int64_t e, const T* dn, const T* dz, const T* v, T* dP,
                     BlockBuffers<T>& buf) {
  pgemm::multiply<T>(n, n, e, {dn, e}, {v, e, true}, dP, n, false, buf.ws, pgemm::Band::lower_tiles);
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t j = 0; j <= i; ++j) dP[i * n + j] += dz[i];
  }
  mask_upper(n, dP);
}

bool is_16bit(DType t) { return t == DType::float16 || t == DType::bfloat16; }

}  // namespace

template <class T>
void causal_backward(const PerformerProblem& p, const TensorView& grad_out, const PerformerGradients& grads) {
  const FeatureMap<T> map(p, pgemm::best_isa());
  const std::int64_t heads = p.batch * p.heads, m = p.num_features, e = p.value_dim, d = p.dim, L = p.queries;
  const CausalParts parts = CausalParts::of(p);
  const std::int64_t size = m * e + m, P_count = parts.count, slot = size + 1;
  const bool recompute_out = is_16bit(p.q.dtype());
  Scratch<T> before, saved(heads * L * (e + 1)), after;  // saved: per head dn (L × e), then dz (L)
  std::vector<Spans<T>> spans(static_cast<std::size_t>(heads * P_count));
  if (P_count > 1) {
    before.allocate(heads * P_count * slot);
    causal_states_before(p, map, parts, before.data());
  }
  const auto part_range = [&](std::int64_t part) {
    return std::pair<std::int64_t, std::int64_t>{part * parts.length, std::min(L, (part + 1) * parts.length)};
  };
  // Forward direction, each part from the state before it: z, dn, dz (kept), dq, the spans.
  parallel_for(heads * P_count, 1, [&](std::int64_t begin, std::int64_t end) {
    BlockBuffers<T> buf(map.wt.isa());
    buf.reserve(kChunk, d, m, e);
    Buffer<T> state_storage;
    pgemm::PackedB<T> packed(map.wt.isa());
    std::vector<std::int64_t> hits;
    for (std::int64_t item = begin; item < end; ++item) {
      const std::int64_t bh = item / P_count, part = item % P_count, b = bh / p.heads, h = bh % p.heads;
      const Rows q = slice(p.q, b, h), k = slice(p.k, b, h);
      T* S = state_storage.get(3 * size);
      T *Sden = S + m * e, *comp = S + size, *block = S + 2 * size;
      std::fill(S, S + 2 * size, T(0));
      T c = causal_start_constant(map);  // the state's constant
      if (P_count > 1) {
        std::copy(before.data() + item * slot, before.data() + item * slot + size, S);
        c = before.data()[item * slot + size];
      }
      T running = c;
      T* Dn = saved.data() + bh * L * (e + 1);
      T* Dz = Dn + L * e;
      T *fq = buf.f(), *fk = buf.f2(), *gq = buf.g(), *dash = buf.g2(), *dphi = buf.h(), *P = buf.p(), *dP = buf.dp();
      const auto [t_begin, t_end] = part_range(part);
      for (std::int64_t t0 = t_begin, n = 0; t0 < t_end; t0 += n) {
        T *z = buf.rows_c(), *diag = buf.rows_e();
        key_dash(map, k, t0, std::min(kChunk, t_end - t0), fk, diag, buf);
        const T* a = read_weights(p.key_weights, b, 0, t0, std::min(kChunk, t_end - t0), buf.rows_b());
        CausalSpan<T> span = causal_span(map, std::min(kChunk, t_end - t0), fk, diag, a, running);
        span.t0 = t0;
        n = span.n;
        if (!span.keyless) {
          rescale_state(map, size, c, span.c, S, comp);
          c = span.c;
        }
        spans[static_cast<std::size_t>(item)].push_back(span);
        T *dz = Dz + t0, *dn = Dn + t0 * e;
        causal_key_features(map, n, fk, fk, fk, diag, a, span.c);
        dash_of_rows(map, q, t0, n, buf.x(), dash, buf.ws);
        query_features(map, n, dash, gq, fq, buf.x(), buf.rows_a(), buf.rows_b());  // top over a: a is used
        read_values(p, b, h, t0, n, buf);
        if (t0 > 0) {
          row_dots(n, m, fq, Sden, z);
        } else {
          std::fill(z, z + n, T(0));
        }
        masked_scores(n, m, fq, fk, P, z, buf);
        if (recompute_out) {  // out = (φq·S + P·V') / z, unrounded
          T* O = buf.o2();
          if (t0 > 0) {
            packed.pack(m, e, {S, e});
            pgemm::multiply<T>(n, {fq, m}, packed, O, e, false, buf.ws);
          } else {
            std::fill(O, O + n * e, T(0));
          }
          pgemm::multiply<T>(n, e, n, {P, n}, {buf.v(), e}, O, e, true, buf.ws, pgemm::Band::k_upto_row);
          divide_rows(n, e, O, z);
        } else {
          read_rows<T>(slice(p.out, b, h), t0, n, e, T(1), buf.o2(), e);
        }
        read_rows<T>(slice(grad_out, b, h), t0, n, e, T(1), dn, e);
        output_gradients(n, e, z, buf.o2(), dn, dz);
        if (grads.q) {
          // dφq = dn·Sᵀ + dz ⊗ S_den + dP·φk'.
          score_gradients(n, e, dn, dz, buf.v(), dP, buf);
          if (t0 > 0) {
            packed.pack(e, m, {S, e, true});
            pgemm::multiply<T>(n, {dn, e}, packed, dphi, m, false, buf.ws);
            add_outer(n, m, dz, Sden, dphi);
          } else {
            std::fill(dphi, dphi + n * m, T(0));
          }
          pgemm::multiply<T>(n, m, n, {dP, n}, {fk, m}, dphi, m, true, buf.ws, pgemm::Band::k_upto_row);
          features_backward(map, n, buf.x(), gq, map.alpha_q, dphi, dash, buf.rows_b(), buf, hits);
          write_rows<T>(buf.dx(), d, n, d, map.x_scale, slice(*grads.q, b, h), t0);
        }
        pgemm::multiply<T>(m, e, n, {fk, m, true}, {buf.v(), e}, block, e, false, buf.ws);
        col_sums(n, m, fk, static_cast<const T*>(nullptr), block + m * e, false);
        compensated_add(size, block, S, comp);
      }
    }
  });
  if (!grads.k && !grads.v) return;
  // after[part] = Σ over the later parts of φq ⊗ dn, with the constant after[part][size] (+inf: none).
  after.allocate(heads * P_count * slot);
  for (std::int64_t bh = 0; bh < heads; ++bh) {
    T* last = after.data() + (bh * P_count + P_count - 1) * slot;
    std::fill(last, last + size, T(0));
    last[size] = std::numeric_limits<T>::infinity();
  }
  if (P_count > 1) {  // slot part first holds part + 1's own sums
    parallel_for(heads * (P_count - 1), 1, [&](std::int64_t begin, std::int64_t end) {
      BlockBuffers<T> buf(map.wt.isa());
      buf.reserve(kChunk, d, m, e);
      for (std::int64_t item = begin; item < end; ++item) {
        const std::int64_t bh = item / (P_count - 1), part = item % (P_count - 1);
        T* R = after.data() + (bh * P_count + part) * slot;
        const T* Dn = saved.data() + bh * L * (e + 1);
        R[size] = query_sums(p, map, bh / p.heads, bh % p.heads, spans[static_cast<std::size_t>(bh * P_count + part + 1)],
                             Dn, Dn + L * e, buf, R);
      }
    });
    for (std::int64_t bh = 0; bh < heads; ++bh) {
      T* first = after.data() + bh * P_count * slot;
      for (std::int64_t part = P_count - 3; part >= 0; --part) {
        T* R = first + part * slot;
        const T* later = R + slot;  // constant later[size] ≥ R[size] (+inf: zero sums)
        if (later[size] == std::numeric_limits<T>::infinity()) continue;
        if (R[size] == std::numeric_limits<T>::infinity()) {
          std::copy(later, later + slot, R);
          continue;
        }
        const T factor = map.softmax ? std::exp(R[size] - later[size]) : T(1);
        for (std::int64_t i = 0; i < size; ++i) R[i] += factor * later[i];
      }
    }
  }
  // Reverse direction, each part from the sums after it: dk, dv.
  parallel_for(heads * P_count, 1, [&](std::int64_t begin, std::int64_t end) {
    BlockBuffers<T> buf(map.wt.isa());
    buf.reserve(kChunk, d, m, e);
    Buffer<T> state_storage;
    pgemm::PackedB<T> packed(map.wt.isa());
    std::vector<std::int64_t> hits;
    for (std::int64_t item = begin; item < end; ++item) {
      const std::int64_t bh = item / P_count, b = bh / p.heads, h = bh % p.heads;
      const Rows q = slice(p.q, b, h), k = slice(p.k, b, h);
      T* R = state_storage.get(3 * size);
      T *Rden = R + m * e, *comp = R + size, *block = R + 2 * size;
      std::copy(after.data() + item * slot, after.data() + item * slot + size, R);
      std::fill(comp, comp + size, T(0));
      T c_R = after.data()[item * slot + size];
      const T* Dn = saved.data() + bh * L * (e + 1);
      const T* Dz = Dn + L * e;
      T *fq = buf.f(), *fk = buf.f2(), *gk = buf.g(), *dash = buf.g2(), *dphi = buf.h(), *P = buf.p(), *dP = buf.dp();
      const Spans<T>& own = spans[static_cast<std::size_t>(item)];
      for (auto span = own.rbegin(); span != own.rend(); ++span) {
        const std::int64_t t0 = span->t0, n = span->n;
        if (span->keyless) {  // keys of weight 0 only: no gradient (and no earlier key has weight either)
          std::fill(buf.o(), buf.o() + n * e, T(0));
          std::fill(buf.dx(), buf.dx() + n * d, T(0));
          if (grads.v) write_rows<T>(buf.o(), e, n, e, T(1), slice(*grads.v, b, h), t0);
          if (grads.k) write_rows<T>(buf.dx(), d, n, d, T(1), slice(*grads.k, b, h), t0);
          continue;
        }
        if (map.softmax && c_R != span->c) {  // R with this span's constant (≤ the later ones')
          scale_all(2 * size, c_R == std::numeric_limits<T>::infinity() ? T(0) : std::exp(span->c - c_R), R,
                    static_cast<T*>(nullptr));
        }
        c_R = span->c;
        const T *dz = Dz + t0, *dn = Dn + t0 * e;
        dash_of_rows(map, q, t0, n, buf.x(), fq, buf.ws);
        query_features(map, n, fq, fq, fq, buf.x(), buf.rows_a(), buf.rows_f());
        T* diag = buf.rows_e();
        key_dash(map, k, t0, n, dash, diag, buf);
        const T* a = read_weights(p.key_weights, b, 0, t0, n, buf.rows_b());
        causal_key_features(map, n, dash, gk, fk, diag, a, span->c);
        read_values(p, b, h, t0, n, buf);
        masked_scores(n, m, fq, fk, P, static_cast<T*>(nullptr), buf);
        const bool later = t0 + n < L;  // R holds the sums over every later span
        if (grads.v) {  // d(w v) = φk'·R + Pᵀ·dn
          if (later) {
            packed.pack(m, e, {R, e});
            pgemm::multiply<T>(n, {fk, m}, packed, buf.o(), e, false, buf.ws);
          } else {
            std::fill(buf.o(), buf.o() + n * e, T(0));
          }
          pgemm::multiply<T>(n, e, n, {P, n, true}, {dn, e}, buf.o(), e, true, buf.ws, pgemm::Band::k_from_row);
          scale_rows(n, e, p.value_weights ? buf.rows_d() : static_cast<const T*>(nullptr), buf.o());
          write_rows<T>(buf.o(), e, n, e, T(1), slice(*grads.v, b, h), t0);
        }
        if (grads.k) {  // dφk' = V'·Rᵀ + R_den + dPᵀ·φq, dφk = a·dφk'
          score_gradients(n, e, dn, dz, buf.v(), dP, buf);
          if (later) {
            packed.pack(e, m, {R, e, true});
            pgemm::multiply<T>(n, {buf.v(), e}, packed, dphi, m, false, buf.ws);
            add_outer(n, m, static_cast<const T*>(nullptr), Rden, dphi);
          } else {
            std::fill(dphi, dphi + n * m, T(0));
          }
          pgemm::multiply<T>(n, m, n, {dP, n, true}, {fq, m}, dphi, m, true, buf.ws, pgemm::Band::k_from_row);
          scale_rows(n, m, a, dphi);
          features_backward(map, n, buf.x(), gk, map.alpha_k, dphi, dash, static_cast<const T*>(nullptr), buf, hits);
          write_rows<T>(buf.dx(), d, n, d, map.x_scale, slice(*grads.k, b, h), t0);
        }
        pgemm::multiply<T>(m, e, n, {fq, m, true}, {dn, e}, block, e, false, buf.ws);
        col_sums(n, m, fq, dz, block + m * e, false);
        compensated_add(size, block, R, comp);
      }
    }
  });
}

template void causal_backward<float>(const PerformerProblem&, const TensorView&, const PerformerGradients&);
template void causal_backward<double>(const PerformerProblem&, const TensorView&, const PerformerGradients&);

}  // namespace sketchcore::detail::performer
