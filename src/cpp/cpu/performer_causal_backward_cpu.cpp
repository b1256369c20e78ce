// Performer attention on the CPU, causal backward (the formulas: cpu/performer_backward_cpu.cpp).
// Per head and part of its chunks (CausalParts): a forward-direction pass from the state before
// the part (the forward's S) forms z, dq and keeps dn, dz (L × (e + 1) per head); the sums
// R = Σ_i φ(q_i) ⊗ dn_i of the parts after each part (their suffix sums); a reverse pass from them
// forms dk and dv:
//   d(w v_j) = φ'(k_j)·R + Σ_{i ≥ j in the chunk} P_ij dn_i,
//   dφ'(k_j) = R·(w v_j) + R_den + Σ_{i ≥ j in the chunk} dP_ij φ(q_i),  dP_ij = dn_i·(w v_j) + dz_i.
// Causal keys' features shift by a constant of W alone, so they have no maximum's gradient.
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "cpu/performer_cpu.hpp"
#include "cpu/performer_passes.hpp"
#include "detail/parallel.hpp"

namespace sketchcore::detail::performer {

namespace {

/// R += Σ_i φ(q_i) ⊗ dn_i and R_den += Σ_i dz_i·φ(q_i) over the chunks of rows [t0, t1) of head (b, h).
template <class T>
void add_query_r(const PerformerProblem& p, const FeatureMap<T>& map, std::int64_t b, std::int64_t h, std::int64_t t0,
                 std::int64_t t1, const T* Dn, const T* Dz, BlockBuffers<T>& buf, T* R) {
  const std::int64_t m = p.num_features, e = p.value_dim;
  const Rows q = slice(p.q, b, h);
  for (std::int64_t i0 = t0; i0 < t1; i0 += kChunk) {
    const std::int64_t n = std::min(kChunk, t1 - i0);
    T* fq = buf.f();
    dash_of_rows(map, q, i0, n, buf.x(), fq, buf.ws);
    query_features(map, n, fq, fq, fq, buf.x(), buf.rows_a(), buf.rows_b());
    pgemm::multiply<T>(m, e, n, {fq, m, true}, {Dn + i0 * e, e}, R, e, true, buf.ws);
    col_sums(n, m, fq, Dz + i0, R + m * e, true);
  }
}

}  // namespace

template <class T>
void causal_backward(const PerformerProblem& p, const TensorView& grad_out, const PerformerGradients& grads) {
  const FeatureMap<T> map(p, pgemm::best_isa());
  const std::int64_t heads = p.batch * p.heads, m = p.num_features, e = p.value_dim, d = p.dim, L = p.queries;
  const CausalParts parts = CausalParts::of(p);
  const std::int64_t size = m * e + m, P_count = parts.count;
  Scratch<T> before, saved(heads * L * (e + 1)), after;  // saved: per head dn (L × e), then dz (L)
  if (P_count > 1) {
    before.allocate(heads * P_count * size);
    causal_states_before(p, map, parts, before.data());
  }
  const auto part_range = [&](std::int64_t part) {
    return std::pair<std::int64_t, std::int64_t>{part * parts.length, std::min(L, (part + 1) * parts.length)};
  };
  // Forward direction, each part from the state before it: z, dn, dz (kept), dq.
  parallel_for(heads * P_count, 1, [&](std::int64_t begin, std::int64_t end) {
    BlockBuffers<T> buf(map.wt.isa());
    buf.reserve(kChunk, d, m, e);
    Buffer<T> state_storage;
    pgemm::PackedB<T> packed(map.wt.isa());
    std::vector<std::int64_t> hits;
    for (std::int64_t item = begin; item < end; ++item) {
      const std::int64_t bh = item / P_count, part = item % P_count, b = bh / p.heads, h = bh % p.heads;
      const Rows q = slice(p.q, b, h), k = slice(p.k, b, h);
      T* S = state_storage.get(size);
      T* Sden = S + m * e;
      if (P_count > 1) {
        std::copy(before.data() + item * size, before.data() + (item + 1) * size, S);
      } else {
        std::fill(S, S + size, T(0));
      }
      T* Dn = saved.data() + bh * L * (e + 1);
      T* Dz = Dn + L * e;
      T *fq = buf.f(), *fk = buf.f2(), *gq = buf.g(), *dash = buf.g2(), *dphi = buf.h(), *P = buf.p(), *dP = buf.dp();
      const auto [t_begin, t_end] = part_range(part);
      for (std::int64_t t0 = t_begin; t0 < t_end; t0 += kChunk) {
        const std::int64_t n = std::min(kChunk, t_end - t0);
        T *z = buf.rows_c(), *dz = Dz + t0, *dn = Dn + t0 * e;
        dash_of_rows(map, k, t0, n, buf.x(), fk, buf.ws);
        const T* a = read_weights(p.key_weights, b, 0, t0, n, buf.rows_b());
        causal_key_features(map, n, fk, fk, fk, buf.x(), buf.rows_a(), a);
        dash_of_rows(map, q, t0, n, buf.x(), dash, buf.ws);
        query_features(map, n, dash, gq, fq, buf.x(), buf.rows_a(), buf.rows_b());
        read_values(p, b, h, t0, n, buf);
        if (t0 > 0) {
          row_dots(n, m, fq, Sden, z);
        } else {
          std::fill(z, z + n, T(0));
        }
        pgemm::multiply<T>(n, n, m, {fq, m}, {fk, m, true}, P, n, false, buf.ws, pgemm::Band::lower_tiles);
        mask_upper(n, P);
        for (std::int64_t i = 0; i < n; ++i) {
          T s = 0;
          for (std::int64_t j = 0; j <= i; ++j) s += P[i * n + j];
          z[i] += s;
        }
        read_rows<T>(slice(grad_out, b, h), t0, n, e, T(1), dn, e);
        read_rows<T>(slice(p.out, b, h), t0, n, e, T(1), buf.o2(), e);
        output_gradients(n, e, z, buf.o2(), dn, dz);
        if (grads.q) {
          // dP = dn·V'ᵀ + dz (j ≤ i); dφq = dn·Sᵀ + dz ⊗ S_den + dP·φk'.
          pgemm::multiply<T>(n, n, e, {dn, e}, {buf.v(), e, true}, dP, n, false, buf.ws, pgemm::Band::lower_tiles);
          for (std::int64_t i = 0; i < n; ++i) {
            for (std::int64_t j = 0; j <= i; ++j) dP[i * n + j] += dz[i];
          }
          mask_upper(n, dP);
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
        pgemm::multiply<T>(m, e, n, {fk, m, true}, {buf.v(), e}, S, e, true, buf.ws);
        col_sums(n, m, fk, static_cast<const T*>(nullptr), Sden, true);
      }
    }
  });
  if (!grads.k && !grads.v) return;
  if (P_count > 1) {  // after[part] = Σ over the later parts of φq ⊗ dn (slot part holds part + 1's own sum first)
    after.allocate(heads * P_count * size);
    parallel_for(heads * (P_count - 1), 1, [&](std::int64_t begin, std::int64_t end) {
      BlockBuffers<T> buf(map.wt.isa());
      buf.reserve(kChunk, d, m, e);
      for (std::int64_t item = begin; item < end; ++item) {
        const std::int64_t bh = item / (P_count - 1), part = item % (P_count - 1) + 1;
        T* R = after.data() + (bh * P_count + part - 1) * size;
        std::fill(R, R + size, T(0));
        const T* Dn = saved.data() + bh * L * (e + 1);
        const auto [t_begin, t_end] = part_range(part);
        add_query_r(p, map, bh / p.heads, bh % p.heads, t_begin, t_end, Dn, Dn + L * e, buf, R);
      }
    });
    for (std::int64_t bh = 0; bh < heads; ++bh) {
      T* first = after.data() + bh * P_count * size;
      std::fill(first + (P_count - 1) * size, first + P_count * size, T(0));
      for (std::int64_t part = P_count - 2; part >= 0; --part) {
        T* R = first + part * size;
        for (std::int64_t i = 0; i < size; ++i) R[i] += R[i + size];
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
      const std::int64_t bh = item / P_count, part = item % P_count, b = bh / p.heads, h = bh % p.heads;
      const Rows q = slice(p.q, b, h), k = slice(p.k, b, h);
      T* R = state_storage.get(size);
      T* Rden = R + m * e;
      if (P_count > 1) {
        std::copy(after.data() + item * size, after.data() + (item + 1) * size, R);
      } else {
        std::fill(R, R + size, T(0));
      }
      const T* Dn = saved.data() + bh * L * (e + 1);
      const T* Dz = Dn + L * e;
      T *fq = buf.f(), *fk = buf.f2(), *gk = buf.g(), *dash = buf.g2(), *dphi = buf.h(), *P = buf.p(), *dP = buf.dp();
      const auto [t_begin, t_end] = part_range(part);
      for (std::int64_t t0 = t_begin + (t_end - t_begin - 1) / kChunk * kChunk; t0 >= t_begin; t0 -= kChunk) {
        const std::int64_t n = std::min(kChunk, t_end - t0);
        const T *dz = Dz + t0, *dn = Dn + t0 * e;
        dash_of_rows(map, q, t0, n, buf.x(), fq, buf.ws);
        query_features(map, n, fq, fq, fq, buf.x(), buf.rows_a(), buf.rows_b());
        dash_of_rows(map, k, t0, n, buf.x(), dash, buf.ws);
        const T* a = read_weights(p.key_weights, b, 0, t0, n, buf.rows_b());
        causal_key_features(map, n, dash, gk, fk, buf.x(), buf.rows_a(), a);
        read_values(p, b, h, t0, n, buf);
        pgemm::multiply<T>(n, n, m, {fq, m}, {fk, m, true}, P, n, false, buf.ws, pgemm::Band::lower_tiles);
        mask_upper(n, P);
        const bool later = t0 + n < L;  // R holds the sums over every later chunk
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
          pgemm::multiply<T>(n, n, e, {dn, e}, {buf.v(), e, true}, dP, n, false, buf.ws, pgemm::Band::lower_tiles);
          for (std::int64_t i = 0; i < n; ++i) {
            for (std::int64_t j = 0; j <= i; ++j) dP[i * n + j] += dz[i];
          }
          mask_upper(n, dP);
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
        pgemm::multiply<T>(m, e, n, {fq, m, true}, {dn, e}, R, e, true, buf.ws);
        col_sums(n, m, fq, dz, Rden, true);
      }
    }
  });
}

template void causal_backward<float>(const PerformerProblem&, const TensorView&, const PerformerGradients&);
template void causal_backward<double>(const PerformerProblem&, const TensorView&, const PerformerGradients&);

}  // namespace sketchcore::detail::performer
