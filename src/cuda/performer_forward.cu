// CUDA Performer attention, forward kernels (host side: performer_cuda.cu; building blocks:
// performer_device.cuh). The algorithm is the CPU's (cpu/performer_forward_cpu.cpp):
//
//   state_parts_kernel   grid (parts, feature groups, heads): each block reduces the keys of one
//                        part for 64 features, A = Σ_j a_j·g_j ⊗ w_j v_j (64 × e) and Aden, in
//                        registers; softmax keys keep a running maximum per feature, rescaling A
//                        when a tile raises it (one pass, no stored features).
//   key_constant_kernel  c = the head's largest dash (the maximum of the per-feature maxima).
//   merge_kernel         S = α·(Σ_parts A·e^(c_f − c) + β·B) (non-causal), or per part the sums
//                        over the earlier parts (causal), in a fixed order (deterministic).
//   query_output_kernel  a block of RB queries: dash over all features into shared memory, φ(q),
//                        out = φ(Q)·S / max(φ(Q)·S_den, tiny).
//   causal_forward_kernel one block per part walks its chunks of RB tokens with a running state
//                        (in global scratch, owned by the block): out = (φ(Q)·S + P·V') /
//                        (φ(Q)·S_den + P·1), P = φ(Q)·φ(K)ᵀ masked to j ≤ i; then S += φ(K)ᵀ·V'.
//
// Everything is computed in float (double for float64) with FMA, in the order the CPU uses within
// a row; results match the CPU within float rounding, not bit for bit.
#include "performer_kernels.cuh"

namespace sketchcore::cuda::performer {

template <class C>
__global__ void __launch_bounds__(kBlockThreads)
    state_parts_kernel(Args<C> a, Parts parts, C* partial, long long partial_size) {
  extern __shared__ unsigned char smem_raw[];
  C* smem = reinterpret_cast<C*>(smem_raw);
  const int part = static_cast<int>(blockIdx.x % parts.count), bh = static_cast<int>(blockIdx.x / parts.count);
  const int group = static_cast<int>(blockIdx.y), b = bh / a.H, h = bh % a.H, d = a.d, e = a.e, m = a.m;
  const int f0 = group * kTile;
  const int et_count = (e + kTile - 1) / kTile, e_pad = et_count * kTile;
  const int ldx = d + 1, ldt = kTile + 1, ldv = e_pad + 1;
  C* Wg = smem;                   // 64 × ldx
  C* X = Wg + kTile * ldx;        // 64 × ldx
  C* Et = X + kTile * ldx;        // 64 features × ldt keys
  C* V = Et + kTile * ldt;        // 64 × ldv
  C* diag = V + kTile * ldv;      // 64
  C* kw = diag + kTile;           // 64
  C* vw = kw + kTile;             // 64
  C* cmax = vw + kTile;           // 64
  C* scale = cmax + kTile;        // 64
  C* Aden = scale + kTile;        // 64
  C* Bsum = Aden + kTile;         // e_pad + 1 (the last: Bden)
  const bool running_max = a.softmax && !a.causal;
  for (int i = static_cast<int>(threadIdx.x); i < kTile; i += kBlockThreads) {
    cmax[i] = running_max ? neg_infinity<C>() : C(0);
    Aden[i] = 0;
  }
  for (int i = static_cast<int>(threadIdx.x); i <= e_pad; i += kBlockThreads) Bsum[i] = 0;
  stage_features(Wg, ldx, a.W, f0, m, d);
  C acc[kMaxValueTiles][4][4];
#pragma unroll
  for (int t = 0; t < kMaxValueTiles; ++t) zero(acc[t]);
  const long long s0 = part * parts.length, s1 = min(static_cast<long long>(a.S), s0 + parts.length);
  for (long long j0 = s0; j0 < s1; j0 += kTile) {
    const int n = static_cast<int>(min(static_cast<long long>(kTile), s1 - j0));
    __syncthreads();
    load_rows<C>(X, ldx, a.k, a.storage, b, h, j0, n, kTile, d, d, a.x_scale);
    load_rows<C>(V, ldv, a.v, a.storage, b, h, j0, n, kTile, e, e_pad, C(1));
    load_weights(kw, a.key_w, static_cast<long long>(b) * a.S, j0, n, kTile);
    load_weights(vw, a.value_w, (static_cast<long long>(b) * a.H + h) * a.S, j0, n, kTile);
    __syncthreads();
    for (int idx = static_cast<int>(threadIdx.x); idx < kTile * e_pad; idx += kBlockThreads) {
      V[(idx / e_pad) * ldv + idx % e_pad] *= vw[idx / e_pad];
    }
    if (a.softmax) half_square_norms(diag, X, ldx, n, d);
    {  // dash (keys × features), stored transposed: Et[f][j]
      C t[4][4];
      zero(t);
      product(t, 0, d, [&](int i, int p) { return X[i * ldx + p]; }, [&](int p, int j) { return Wg[j * ldx + p]; });
      for_tile(t, [&](int i, int j, C value) { Et[j * ldt + i] = value; });
    }
    __syncthreads();
    if (running_max) {  // per feature: the tile's maximum over its valid keys raises the running one
      for (int f = warp_id(); f < kTile; f += kBlockThreads / 32) {
        C best = neg_infinity<C>();
        for (int j = lane_id(); j < n; j += 32) best = Et[f * ldt + j] > best ? Et[f * ldt + j] : best;
        best = warp_max(best);
        if (lane_id() == 0) {
          const C raised = best > cmax[f] ? best : cmax[f];
          scale[f] = cmax[f] == neg_infinity<C>() ? C(0) : exp_of(cmax[f] - raised);
          Aden[f] *= scale[f];
          cmax[f] = raised;
        }
      }
      __syncthreads();
#pragma unroll
      for (int t = 0; t < kMaxValueTiles; ++t) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
#pragma unroll
          for (int c = 0; c < 4; ++c) acc[t][r][c] *= scale[thread_row() + 16 * r];
        }
      }
    }
    for (int idx = static_cast<int>(threadIdx.x); idx < kTile * kTile; idx += kBlockThreads) {
      const int f = idx / kTile, j = idx % kTile;
      C g = 0;
      if (j < n && f0 + f < m) {
        const C dash = Et[f * ldt + j];
        if (a.softmax) {
          g = exp_of((dash - diag[j]) - (a.causal ? *a.key_bound : cmax[f]));
        } else {
          const C u = dash * a.inv_sqrt_m;
          g = u > C(0) ? u : C(0);
        }
        g *= kw[j];
      }
      Et[f * ldt + j] = g;
    }
    __syncthreads();
    for (int f = warp_id(); f < kTile; f += kBlockThreads / 32) {
      C s = 0;
      for (int j = lane_id(); j < n; j += 32) s += Et[f * ldt + j];
      s = warp_sum(s);
      if (lane_id() == 0) Aden[f] += s;
    }
#pragma unroll
    for (int t = 0; t < kMaxValueTiles; ++t) {
      if (t < et_count) {
        product(acc[t], 0, n, [&](int f, int p) { return Et[f * ldt + p]; },
                [&](int p, int c) { return V[p * ldv + t * kTile + c]; });
      }
    }
    if (group == 0) {
      for (int c = static_cast<int>(threadIdx.x); c <= e_pad; c += kBlockThreads) {
        C s = 0;
        for (int j = 0; j < n; ++j) s += kw[j] * (c < e_pad ? V[j * ldv + c] : C(1));
        Bsum[c] += s;
      }
    }
  }
  __syncthreads();
  C* out = partial + (static_cast<long long>(bh) * parts.count + part) * partial_size;  // [A | Aden | cmax | B | Bden]
#pragma unroll
  for (int t = 0; t < kMaxValueTiles; ++t) {
    if (t < et_count) {
      for_tile(acc[t], [&](int f, int c, C value) {
        if (f0 + f < m && t * kTile + c < e) out[static_cast<long long>(f0 + f) * e + t * kTile + c] = value;
      });
    }
  }
  for (int f = static_cast<int>(threadIdx.x); f < kTile; f += kBlockThreads) {
    if (f0 + f < m) {
      out[static_cast<long long>(m) * e + f0 + f] = Aden[f];
      out[static_cast<long long>(m) * e + m + f0 + f] = cmax[f];
    }
  }
  if (group == 0) {
    for (int c = static_cast<int>(threadIdx.x); c < e; c += kBlockThreads) {
      out[static_cast<long long>(m) * e + 2 * m + c] = Bsum[c];
    }
    if (threadIdx.x == 0) out[static_cast<long long>(m) * e + 2 * m + e] = Bsum[e_pad];
  }
}

template <class C>
__global__ void __launch_bounds__(kBlockThreads) key_bound_kernel(const C* W, int m, int d, C* bound) {
  __shared__ C scratch[kBlockThreads / 32];
  C best = 0;
  for (int f = static_cast<int>(threadIdx.x); f < m; f += kBlockThreads) {
    C sq = 0;
    for (int c = 0; c < d; ++c) sq += W[static_cast<long long>(f) * d + c] * W[static_cast<long long>(f) * d + c];
    best = sq > best ? sq : best;
  }
  best = warp_max(best);
  if (lane_id() == 0) scratch[warp_id()] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    C all = scratch[0];
    for (int w = 1; w < kBlockThreads / 32; ++w) all = scratch[w] > all ? scratch[w] : all;
    bound[0] = all / 2;
  }
}

template <class C>
__global__ void __launch_bounds__(kBlockThreads)
    key_constant_kernel(const C* partial, long long partial_size, int part_count, int m, int e, C* constant) {
  __shared__ C scratch[kBlockThreads / 32];
  const int bh = static_cast<int>(blockIdx.x);
  C best = neg_infinity<C>();
  for (int idx = static_cast<int>(threadIdx.x); idx < part_count * m; idx += kBlockThreads) {
    const C value = partial[(static_cast<long long>(bh) * part_count + idx / m) * partial_size +
                            static_cast<long long>(m) * e + m + idx % m];
    best = value > best ? value : best;
  }
  best = warp_max(best);
  if (lane_id() == 0) scratch[warp_id()] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    C all = scratch[0];
    for (int w = 1; w < kBlockThreads / 32; ++w) all = scratch[w] > all ? scratch[w] : all;
    constant[bh] = all;
  }
}

template <class C>
__global__ void __launch_bounds__(kBlockThreads)
    merge_kernel(const C* partial, long long partial_size, int part_count, int m, int e, bool softmax, bool causal,
                 C alpha, C beta, const C* constant, C* state) {
  const long long size = static_cast<long long>(m) * e + m;
  const long long blocks_per_head = (size + kBlockThreads - 1) / kBlockThreads;
  const int bh = static_cast<int>(blockIdx.x / blocks_per_head);
  const long long idx = static_cast<long long>(blockIdx.x % blocks_per_head) * kBlockThreads + threadIdx.x;
  if (idx >= size) return;
  const bool den = idx >= static_cast<long long>(m) * e;
  const int f = den ? static_cast<int>(idx - static_cast<long long>(m) * e) : static_cast<int>(idx / e);
  const long long b_index = static_cast<long long>(m) * e + 2 * m + (den ? e : static_cast<int>(idx % e));
  const C c = softmax && !causal ? constant[bh] : C(0);
  C sum_a = 0, sum_b = 0;
  for (int p = 0; p < part_count; ++p) {
    const C* part = partial + (static_cast<long long>(bh) * part_count + p) * partial_size;
    if (causal) {  // the state before part p: the sums over the parts before it
      state[(static_cast<long long>(bh) * part_count + p) * size + idx] = alpha * (sum_a + beta * sum_b);
    }
    C weight = 1;
    if (softmax && !causal) {
      const C cp = part[static_cast<long long>(m) * e + m + f];
      weight = cp == neg_infinity<C>() ? C(0) : exp_of(cp - c);
    }
    sum_a += weight * part[idx];
    sum_b += part[b_index];
  }
  if (!causal) state[static_cast<long long>(bh) * size + idx] = alpha * (sum_a + beta * sum_b);
}

template <class C, int RR>
__global__ void __launch_bounds__(kBlockThreads) query_output_kernel(Args<C> a, const C* state) {
  extern __shared__ unsigned char smem_raw[];
  C* smem = reinterpret_cast<C*>(smem_raw);
  constexpr int RB = 16 * RR;
  const long long tiles = (a.L + RB - 1) / RB;
  const int bh = static_cast<int>(blockIdx.x / tiles), b = bh / a.H, h = bh % a.H, d = a.d, e = a.e, m = a.m;
  const long long i0 = static_cast<long long>(blockIdx.x % tiles) * RB;
  const int n = static_cast<int>(min(static_cast<long long>(RB), a.L - i0));
  const int et_count = (e + kTile - 1) / kTile, ldx = d + 1, ldf = m + 1, lds = max(d, et_count * kTile) + 1;
  C* X = smem;              // RB × ldx
  C* F = X + RB * ldx;      // RB × ldf
  C* stage = F + RB * ldf;  // 64 × lds
  C* diag = stage + kTile * lds;
  C* top = diag + RB;
  C* z = top + RB;
  const C* S = state + static_cast<long long>(bh) * (static_cast<long long>(m) * e + m);
  load_rows<C>(X, ldx, a.q, a.storage, b, h, i0, n, RB, d, d, a.x_scale);
  __syncthreads();
  if (a.softmax) half_square_norms(diag, X, ldx, n, d);
  dash_rows<RR>(F, ldf, X, ldx, a.W, m, d, stage, lds);
  if (a.softmax) row_max(top, static_cast<C*>(nullptr), F, ldf, n, m);
  __syncthreads();
  gate(F, ldf, n, m, a.softmax, diag, top, C(0), a.inv_sqrt_m, static_cast<unsigned char*>(nullptr));
  __syncthreads();
  affine(F, ldf, n, m, a.alpha_q, a.beta_q, static_cast<const C*>(nullptr));
  __syncthreads();
  row_dots(z, F, ldf, n, m, S + static_cast<long long>(m) * e);
  C acc[kMaxValueTiles][RR][4];
  features_times_state<RR>(acc, F, ldf, S, stage, lds, m, e, et_count);
  __syncthreads();
#pragma unroll
  for (int t = 0; t < kMaxValueTiles; ++t) {
    if (t < et_count) {
      for_tile(acc[t], [&](int i, int c, C value) {
        if (i < n && t * kTile + c < e) {
          const C zc = z[i] > tiny_of<C>() ? z[i] : tiny_of<C>();
          store_element<C>(a.out, a.storage, b, h, i0 + i, t * kTile + c, value / zc);
        }
      });
    }
  }
}

template <class C, int RR>
__global__ void __launch_bounds__(kBlockThreads)
    causal_forward_kernel(Args<C> a, Parts parts, const C* state_before, C* running) {
  extern __shared__ unsigned char smem_raw[];
  C* smem = reinterpret_cast<C*>(smem_raw);
  constexpr int RB = 16 * RR;
  const int part = static_cast<int>(blockIdx.x % parts.count), bh = static_cast<int>(blockIdx.x / parts.count);
  const int b = bh / a.H, h = bh % a.H, d = a.d, e = a.e, m = a.m;
  const int et_count = (e + kTile - 1) / kTile, e_pad = et_count * kTile;
  const int ldx = d + 1, ldf = m + 1, ldv = e_pad + 1, ldp = kTile + 1, lds = max(d, e_pad) + 1;
  C* X = smem;               // RB × ldx
  C* Fq = X + RB * ldx;      // RB × ldf
  C* Fk = Fq + RB * ldf;     // RB × ldf
  C* V = Fk + RB * ldf;      // RB × ldv
  C* P = V + RB * ldv;       // RB × ldp
  C* stage = P + RB * ldp;   // 64 × lds
  C* diag = stage + kTile * lds;
  C* top = diag + RB;
  C* kw = top + RB;
  C* vw = kw + RB;
  C* z = vw + RB;
  const long long size = static_cast<long long>(m) * e + m;
  C* S = running + (static_cast<long long>(bh) * parts.count + part) * size;
  const C* before = state_before + (static_cast<long long>(bh) * parts.count + part) * size;
  for (long long idx = threadIdx.x; idx < size; idx += kBlockThreads) S[idx] = before[idx];
  const long long t_begin = part * parts.length, t_end = min(static_cast<long long>(a.L), t_begin + parts.length);
  for (long long t0 = t_begin; t0 < t_end; t0 += RB) {
    const int n = static_cast<int>(min(static_cast<long long>(RB), t_end - t0));
    __syncthreads();
    load_rows<C>(X, ldx, a.q, a.storage, b, h, t0, n, RB, d, d, a.x_scale);
    __syncthreads();
    if (a.softmax) half_square_norms(diag, X, ldx, n, d);
    dash_rows<RR>(Fq, ldf, X, ldx, a.W, m, d, stage, lds);
    if (a.softmax) row_max(top, static_cast<C*>(nullptr), Fq, ldf, n, m);
    __syncthreads();
    gate(Fq, ldf, n, m, a.softmax, diag, top, C(0), a.inv_sqrt_m, static_cast<unsigned char*>(nullptr));
    __syncthreads();
    affine(Fq, ldf, n, m, a.alpha_q, a.beta_q, static_cast<const C*>(nullptr));
    load_rows<C>(X, ldx, a.k, a.storage, b, h, t0, n, RB, d, d, a.x_scale);
    load_rows<C>(V, ldv, a.v, a.storage, b, h, t0, n, RB, e, e_pad, C(1));
    load_weights(kw, a.key_w, static_cast<long long>(b) * a.S, t0, n, RB);
    load_weights(vw, a.value_w, (static_cast<long long>(b) * a.H + h) * a.S, t0, n, RB);
    __syncthreads();
    for (int idx = static_cast<int>(threadIdx.x); idx < RB * e_pad; idx += kBlockThreads) {
      V[(idx / e_pad) * ldv + idx % e_pad] *= vw[idx / e_pad];
    }
    if (a.softmax) half_square_norms(diag, X, ldx, n, d);
    dash_rows<RR>(Fk, ldf, X, ldx, a.W, m, d, stage, lds);
    gate(Fk, ldf, n, m, a.softmax, diag, static_cast<const C*>(nullptr), a.softmax ? *a.key_bound : C(0), a.inv_sqrt_m,
         static_cast<unsigned char*>(nullptr));
    __syncthreads();
    affine(Fk, ldf, n, m, a.alpha_k, a.beta_k, kw);
    __syncthreads();
    row_dots(z, Fq, ldf, n, m, S + static_cast<long long>(m) * e);
    {  // P = φ(Q)·φ(K)ᵀ on and below the diagonal
      C t[RR][4];
      zero(t);
      product(t, 0, m, [&](int i, int p) { return Fq[i * ldf + p]; },
              [&](int p, int j) { return j < RB ? Fk[j * ldf + p] : C(0); });
      for_tile(t, [&](int i, int j, C value) {
        if (j < RB) P[i * ldp + j] = j <= i && j < n ? value : C(0);
      });
    }
    __syncthreads();
    for (int i = warp_id(); i < n; i += kBlockThreads / 32) {
      C s = 0;
      for (int j = lane_id(); j <= i; j += 32) s += P[i * ldp + j];
      s = warp_sum(s);
      if (lane_id() == 0) z[i] += s;
    }
    C acc[kMaxValueTiles][RR][4];
    features_times_state<RR>(acc, Fq, ldf, S, stage, lds, m, e, et_count);
#pragma unroll
    for (int t = 0; t < kMaxValueTiles; ++t) {
      if (t < et_count) {
        product(acc[t], 0, n, [&](int i, int p) { return P[i * ldp + p]; },
                [&](int p, int c) { return V[p * ldv + t * kTile + c]; });
        for_tile(acc[t], [&](int i, int c, C value) {
          if (i < n && t * kTile + c < e) {
            const C zc = z[i] > tiny_of<C>() ? z[i] : tiny_of<C>();
            store_element<C>(a.out, a.storage, b, h, t0 + i, t * kTile + c, value / zc);
          }
        });
      }
    }
    __syncthreads();
    // S += φ(K)ᵀ·V', S_den += Σ_j φ(k_j): the block's own rows of its scratch state.
    for (int f0 = 0; f0 < m; f0 += kTile) {
#pragma unroll
      for (int t = 0; t < kMaxValueTiles; ++t) {
        if (t < et_count) {
          C u[4][4];
          zero(u);
          product(u, 0, n, [&](int f, int p) { return f0 + f < m ? Fk[p * ldf + f0 + f] : C(0); },
                  [&](int p, int c) { return V[p * ldv + t * kTile + c]; });
          for_tile(u, [&](int f, int c, C value) {
            if (f0 + f < m && t * kTile + c < e) S[static_cast<long long>(f0 + f) * e + t * kTile + c] += value;
          });
        }
      }
    }
    for (int f = static_cast<int>(threadIdx.x); f < m; f += kBlockThreads) {
      C s = 0;
      for (int j = 0; j < n; ++j) s += Fk[j * ldf + f];
      S[static_cast<long long>(m) * e + f] += s;
    }
  }
}

template <class C>
void launch_state_parts(const Args<C>& args, Parts parts, C* partial, std::size_t smem, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(parts.count) * args.B * args.H, (args.m + kTile - 1) / kTile);
  allow_smem(state_parts_kernel<C>, smem);
  state_parts_kernel<C><<<grid, kBlockThreads, smem, stream>>>(args, parts, partial, partial_elements(args.m, args.e));
  check(cudaGetLastError(), "state_parts_kernel");
}

template <class C>
void launch_key_bound(const C* W, int m, int d, C* bound, cudaStream_t stream) {
  key_bound_kernel<C><<<1, kBlockThreads, 0, stream>>>(W, m, d, bound);
  check(cudaGetLastError(), "key_bound_kernel");
}

template <class C>
void launch_key_constant(const C* partial, int heads, int part_count, int m, int e, C* constant, cudaStream_t stream) {
  key_constant_kernel<C><<<heads, kBlockThreads, 0, stream>>>(partial, partial_elements(m, e), part_count, m, e,
                                                                constant);
  check(cudaGetLastError(), "key_constant_kernel");
}

template <class C>
void launch_merge(const C* partial, int heads, int part_count, int m, int e, bool softmax, bool causal, C alpha,
                  C beta, const C* constant, C* state, cudaStream_t stream) {
  const long long size = static_cast<long long>(m) * e + m;
  const dim3 grid(static_cast<unsigned>((size + kBlockThreads - 1) / kBlockThreads * heads));
  merge_kernel<C><<<grid, kBlockThreads, 0, stream>>>(partial, partial_elements(m, e), part_count, m, e, softmax,
                                                       causal, alpha, beta, constant, state);
  check(cudaGetLastError(), "merge_kernel");
}

template <class C>
void launch_query_output(const Args<C>& args, const C* state, int rr, std::size_t smem, cudaStream_t stream) {
  const int rb = 16 * rr;
  const dim3 grid(static_cast<unsigned>((static_cast<long long>(args.L) + rb - 1) / rb * args.B * args.H));
  const auto kernel = rr == 4 ? query_output_kernel<C, 4> : rr == 2 ? query_output_kernel<C, 2>
                                                                        : query_output_kernel<C, 1>;
  allow_smem(kernel, smem);
  kernel<<<grid, kBlockThreads, smem, stream>>>(args, state);
  check(cudaGetLastError(), "query_output_kernel");
}

template <class C>
void launch_causal_forward(const Args<C>& args, Parts parts, const C* state_before, C* running, int rr,
                           std::size_t smem, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(parts.count) * args.B * args.H);
  const auto kernel = rr == 4 ? causal_forward_kernel<C, 4> : rr == 2 ? causal_forward_kernel<C, 2>
                                                                          : causal_forward_kernel<C, 1>;
  allow_smem(kernel, smem);
  kernel<<<grid, kBlockThreads, smem, stream>>>(args, parts, state_before, running);
  check(cudaGetLastError(), "causal_forward_kernel");
}

#define SKETCHCORE_PERFORMER_FORWARD(C)                                                                      \
  template void launch_state_parts<C>(const Args<C>&, Parts, C*, std::size_t, cudaStream_t);              \
  template void launch_query_output<C>(const Args<C>&, const C*, int, std::size_t, cudaStream_t);         \
  template void launch_causal_forward<C>(const Args<C>&, Parts, const C*, C*, int, std::size_t, cudaStream_t);

SKETCHCORE_PERFORMER_FORWARD(float)
SKETCHCORE_PERFORMER_FORWARD(double)

template void launch_key_bound<float>(const float*, int, int, float*, cudaStream_t);
template void launch_key_bound<double>(const double*, int, int, double*, cudaStream_t);
template void launch_key_constant<float>(const float*, int, int, int, int, float*, cudaStream_t);
template void launch_key_constant<double>(const double*, int, int, int, int, double*, cudaStream_t);
template void launch_merge<float>(const float*, int, int, int, int, bool, bool, float, float, const float*, float*,
                                  cudaStream_t);
template void launch_merge<double>(const double*, int, int, int, int, bool, bool, double, double, const double*,
                                   double*, cudaStream_t);

}  // namespace sketchcore::cuda::performer
