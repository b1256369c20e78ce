// Performer attention on the CPU, causal forward (notation: cpu/performer_cpu.hpp; the keys' constants:
// cpu/performer_passes.hpp).
//
// Per head, in spans of at most kChunk tokens: out = (φ(Q)·S + P·V') / (φ(Q)·S_den + P·1) with
// P = φ(Q)·φ(K)ᵀ masked to j ≤ i (the products skip the masked half) and S, S_den the sums over the
// earlier spans' keys, kept with the current span's constant (rescaled when a span raises it), which
// the span then joins through a compensated sum. Heads with few (batch, head) pairs are cut into
// parts (CausalParts) that start from the sums over the parts before them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "cpu/cpu_ops.hpp"
#include "cpu/performer_cpu.hpp"
#include "cpu/performer_passes.hpp"
#include "detail/parallel.hpp"

namespace sketchcore::detail::performer {

template <class T>
T causal_start_constant(const FeatureMap<T>& map) {
  return map.softmax ? -std::numeric_limits<T>::infinity() : T(0);
}

template <class T>
CausalSpan<T> causal_span(const FeatureMap<T>& map, std::int64_t n, const T* dash, const T* diag, const T* a,
                          T& running) {
  CausalSpan<T> span;
  span.n = n;
  if (!map.softmax) {
    running = T(0);
    return span;
  }
  const std::int64_t m = map.m;
  const auto exponent = [&](std::int64_t j) {
    return a && a[j] == T(0) ? -std::numeric_limits<T>::infinity()
                             : *std::max_element(dash + j * m, dash + (j + 1) * m) - diag[j];
  };
  running = std::max(running, exponent(0));
  span.keyless = running == -std::numeric_limits<T>::infinity();
  span.c = span.keyless ? T(0) : running;
  for (span.n = 1; span.n < n; ++span.n) {
    const T r = exponent(span.n);
    if (r == -std::numeric_limits<T>::infinity()) continue;  // a key of weight 0
    if (span.keyless || static_cast<double>(r) - static_cast<double>(span.c) > kSpanSpread) break;
    running = std::max(running, r);
  }
  return span;
}

template <class T>
void rescale_state(const FeatureMap<T>& map, std::int64_t size, T c_old, T c_new, T* S, T* comp) {
  if (!map.softmax || c_new == c_old || c_old == -std::numeric_limits<T>::infinity()) return;
  const T shrink = std::exp(c_old - c_new);
  for (std::int64_t i = 0; i < size; ++i) S[i] *= shrink;
  if (comp) {
    for (std::int64_t i = 0; i < size; ++i) comp[i] *= shrink;
  }
}

template <class T>
void causal_key_features(const FeatureMap<T>& map, std::int64_t n, const T* dash, T* g, T* phi, const T* diag,
                         const T* a, T c) {
  if (map.softmax) {
    const bool none = c == -std::numeric_limits<T>::infinity();  // keys of weight 0 only
    exp_shifted(n, map.m, dash, diag, static_cast<const T*>(nullptr), none ? T(0) : c, g);
    for (std::int64_t i = 0; a && i < n; ++i) {  // exp may overflow where no weight keeps it in range
      if (a[i] == T(0)) std::fill(g + i * map.m, g + (i + 1) * map.m, T(0));
    }
  } else {
    relu_scaled(n, map.m, dash, map.inv_sqrt_m, g);
  }
  affine(n, map.m, g, map.alpha_k, map.beta_k, a, phi);
}

CausalParts CausalParts::of(const PerformerProblem& p) {
  constexpr std::int64_t kBusyHeads = 8;
  CausalParts parts;
  const std::int64_t heads = std::max<std::int64_t>(1, p.batch * p.heads);
  const std::int64_t chunks = std::max<std::int64_t>(1, (p.queries + kChunk - 1) / kChunk);
  parts.count = std::clamp<std::int64_t>((kBusyHeads + heads - 1) / heads, 1, chunks);
  parts.length = (chunks + parts.count - 1) / parts.count * kChunk;
  parts.count = std::max<std::int64_t>(1, (p.queries + parts.length - 1) / parts.length);
  return parts;
}

namespace {

/// The sums over the keys [t0, t1) of head (b, h) of φ'(k) ⊗ w·v and φ'(k) into S (m × e, then m),
/// zeroed first, with the keys' running maximum as their constant (returned). No queries read these
/// sums, so one running constant (rescaled as it grows) serves every key.
template <class T>
T key_sums(const PerformerProblem& p, const FeatureMap<T>& map, std::int64_t b, std::int64_t h, std::int64_t t0,
           std::int64_t t1, BlockBuffers<T>& buf, T* S) {
  const std::int64_t m = p.num_features, e = p.value_dim, size = m * e + m;
  std::vector<T> comp(static_cast<std::size_t>(size), T(0)), block(static_cast<std::size_t>(size));
  std::fill(S, S + size, T(0));
  const Rows k = slice(p.k, b, h);
  T c = causal_start_constant(map);
  for (std::int64_t j0 = t0; j0 < t1; j0 += kChunk) {
    const std::int64_t n = std::min(kChunk, t1 - j0);
    T *fk = buf.f2(), *diag = buf.rows_a();
    dash_of_rows(map, k, j0, n, buf.x(), fk, buf.ws);
    const T* a = read_weights(p.key_weights, b, 0, j0, n, buf.rows_b());
    if (map.softmax) {
      half_square_norms(n, map.d, buf.x(), diag);
      T top = c;
      for (std::int64_t i = 0; i < n; ++i) {
        if (!a || a[i] != T(0)) top = std::max(top, *std::max_element(fk + i * m, fk + (i + 1) * m) - diag[i]);
      }
      rescale_state(map, size, c, top, S, comp.data());
      c = top;
    }
    causal_key_features(map, n, fk, fk, fk, diag, a, c);
    read_values(p, b, h, j0, n, buf);
    pgemm::multiply<T>(m, e, n, {fk, m, true}, {buf.v(), e}, block.data(), e, false, buf.ws);
    col_sums(n, m, fk, static_cast<const T*>(nullptr), block.data() + m * e, false);
    compensated_add(size, block.data(), S, comp.data());
  }
  return c;
}

}  // namespace

template <class T>
void causal_states_before(const PerformerProblem& p, const FeatureMap<T>& map, CausalParts parts, T* before) {
  const std::int64_t heads = p.batch * p.heads, size = p.num_features * p.value_dim + p.num_features;
  const std::int64_t slot = size + 1;
  // Slot part + 1 gets the sums of part `part`'s own keys, then a running sum makes them prefixes.
  parallel_for(heads * (parts.count - 1), 1, [&](std::int64_t begin, std::int64_t end) {
    BlockBuffers<T> buf(map.wt.isa());
    buf.reserve(kChunk, p.dim, p.num_features, p.value_dim);
    for (std::int64_t item = begin; item < end; ++item) {
      const std::int64_t bh = item / (parts.count - 1), part = item % (parts.count - 1);
      T* S = before + (bh * parts.count + part + 1) * slot;
      S[size] = key_sums(p, map, bh / p.heads, bh % p.heads, part * parts.length,
                         std::min(p.queries, (part + 1) * parts.length), buf, S);
    }
  });
  for (std::int64_t bh = 0; bh < heads; ++bh) {
    T* first = before + bh * parts.count * slot;
    std::fill(first, first + size, T(0));
    first[size] = causal_start_constant(map);
    for (std::int64_t part = 1; part < parts.count; ++part) {
      T* S = first + part * slot;
      const T* prev = S - slot;
      const T c = std::max(prev[size], S[size]);
      rescale_state(map, size, S[size], c, S, static_cast<T*>(nullptr));
      std::vector<T> earlier(prev, prev + size);
      rescale_state(map, size, prev[size], c, earlier.data(), static_cast<T*>(nullptr));
      for (std::int64_t i = 0; i < size; ++i) S[i] += earlier[static_cast<std::size_t>(i)];
      S[size] = c;
    }
  }
}

template <class T>
void causal_forward(const PerformerProblem& p) {
  const FeatureMap<T> map(p, pgemm::best_isa());
  const std::int64_t heads = p.batch * p.heads, m = p.num_features, e = p.value_dim, d = p.dim, L = p.queries;
  const CausalParts parts = CausalParts::of(p);
  const std::int64_t size = m * e + m, slot = size + 1;
  Scratch<T> before;
  if (parts.count > 1) {
    before.allocate(heads * parts.count * slot);
    causal_states_before(p, map, parts, before.data());
  }
  parallel_for(heads * parts.count, 1, [&](std::int64_t begin, std::int64_t end) {
    BlockBuffers<T> buf(map.wt.isa());
    buf.reserve(kChunk, d, m, e);
    Buffer<T> state_storage;
    pgemm::PackedB<T> packed(map.wt.isa());
    for (std::int64_t item = begin; item < end; ++item) {
      const std::int64_t bh = item / parts.count, part = item % parts.count, b = bh / p.heads, h = bh % p.heads;
      T* S = state_storage.get(3 * size);
      T *Sden = S + m * e, *comp = S + size, *block = S + 2 * size;
      std::fill(S, S + 2 * size, T(0));
      T c = causal_start_constant(map);  // the state's constant
      if (parts.count > 1) {
        std::copy(before.data() + item * slot, before.data() + item * slot + size, S);
        c = before.data()[item * slot + size];
      }
      T running = c;  // the keys' running maximum
      const Rows q = slice(p.q, b, h), k = slice(p.k, b, h), out = slice(p.out, b, h);
      const std::int64_t t_end = std::min(L, (part + 1) * parts.length);
      for (std::int64_t t0 = part * parts.length, n = 0; t0 < t_end; t0 += n) {
        T *fq = buf.f(), *fk = buf.f2(), *P = buf.p(), *O = buf.o(), *z = buf.rows_c(), *diag = buf.rows_e();
        dash_of_rows(map, k, t0, std::min(kChunk, t_end - t0), buf.x(), fk, buf.ws);
        if (map.softmax) half_square_norms(std::min(kChunk, t_end - t0), d, buf.x(), diag);
        const T* a = read_weights(p.key_weights, b, 0, t0, std::min(kChunk, t_end - t0), buf.rows_b());
        const CausalSpan<T> span = causal_span(map, std::min(kChunk, t_end - t0), fk, diag, a, running);
        n = span.n;
        if (!span.keyless) {
          rescale_state(map, size, c, span.c, S, comp);
          c = span.c;
        }
        causal_key_features(map, n, fk, fk, fk, diag, a, span.c);
        dash_of_rows(map, q, t0, n, buf.x(), fq, buf.ws);
        query_features(map, n, fq, fq, fq, buf.x(), buf.rows_a(), buf.rows_f());
        read_values(p, b, h, t0, n, buf);
        // Earlier spans through the state, this one through the masked product.
        if (t0 > 0) {
          packed.pack(m, e, {S, e});
          pgemm::multiply<T>(n, {fq, m}, packed, O, e, false, buf.ws);
          row_dots(n, m, fq, Sden, z);
        } else {
          std::fill(O, O + n * e, T(0));
          std::fill(z, z + n, T(0));
        }
        pgemm::multiply<T>(n, n, m, {fq, m}, {fk, m, true}, P, n, false, buf.ws, pgemm::Band::lower_tiles);
        mask_upper(n, P);
        pgemm::multiply<T>(n, e, n, {P, n}, {buf.v(), e}, O, e, true, buf.ws, pgemm::Band::k_upto_row);
        for (std::int64_t i = 0; i < n; ++i) {
          T s = 0;
          for (std::int64_t j = 0; j <= i; ++j) s += P[i * n + j];
          z[i] += s;
        }
        divide_rows(n, e, O, z);
        write_rows<T>(O, e, n, e, T(1), out, t0);
        pgemm::multiply<T>(m, e, n, {fk, m, true}, {buf.v(), e}, block, e, false, buf.ws);
        col_sums(n, m, fk, static_cast<const T*>(nullptr), block + m * e, false);
        compensated_add(size, block, S, comp);
      }
    }
  });
}

#define SKETCHCORE_PERFORMER_CAUSAL(T)                                                                        \
  template T causal_start_constant<T>(const FeatureMap<T>&);                                                   \
  template CausalSpan<T> causal_span<T>(const FeatureMap<T>&, std::int64_t, const T*, const T*, const T*, T&);         \
  template void rescale_state<T>(const FeatureMap<T>&, std::int64_t, T, T, T*, T*);                            \
  template void causal_key_features<T>(const FeatureMap<T>&, std::int64_t, const T*, T*, T*, const T*, const T*, \
                                       T);                                                                     \
  template void causal_states_before<T>(const PerformerProblem&, const FeatureMap<T>&, CausalParts, T*);      \
  template void causal_forward<T>(const PerformerProblem&);

SKETCHCORE_PERFORMER_CAUSAL(float)
SKETCHCORE_PERFORMER_CAUSAL(double)

}  // namespace sketchcore::detail::performer
