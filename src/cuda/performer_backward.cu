// CUDA Performer attention, backward kernels (host side: performer_cuda.cu). The formulas are the
// CPU's (cpu/performer_backward_cpu.cpp):
//
//   query_grad_kernel   per (head, query part): for each block of queries, the features (and which
//                       entries are their rows' maxima), dn and dz, dq, and the part's
//                       dS = Σ_i φ(q_i) ⊗ dn_i, dS_den = Σ_i dz_i·φ(q_i) (in global memory the
//                       block owns: no atomics, a fixed summation order).
//   key_grad_kernel     per (head, key part): for each block of keys, feature group by feature
//                       group, dφ'(k) = V'·dSᵀ + dS_den, dv, dk, the keys' constant's gradient and
//                       its tied entries (an atomic counter per head, the entries up to a capacity).
//   tie_fixup_kernel    per head: the constant's gradient split among its tied entries (from the
//                       list, or when it overflowed from a scan of the keys with the same products).
//   causal_grad_q_kernel / causal_r_parts_kernel / causal_grad_kv_kernel: the causal passes, each
//                       block walking its part of the chunks with a running state (forward for dq,
//                       dn and dz; reverse, from the suffix sums of R = Σ φ(q) ⊗ dn, for dk and dv).
#include "performer_grad.cuh"
#include "performer_kernels.cuh"

namespace sketchcore::cuda::performer {

template <class C, int RR>
__global__ void __launch_bounds__(kBlockThreads)
    query_grad_kernel(Args<C> a, Parts parts, const C* state, C* ds_partial) {
  extern __shared__ unsigned char smem_raw[];
  C* smem = reinterpret_cast<C*>(smem_raw);
  constexpr int RB = 16 * RR;
  const int part = static_cast<int>(blockIdx.x % parts.count), bh = static_cast<int>(blockIdx.x / parts.count);
  const int b = bh / a.H, h = bh % a.H, d = a.d, e = a.e, m = a.m, e_pad = padded(e);
  const int ldx = d + 1, ldf = m + 1, ldv = e_pad + 1, lds = max(d, e_pad) + 1;
  C* X = smem;
  C* E = X + RB * ldx;       // g of the queries (RB × ldf)
  C* dF = E + RB * ldf;      // dφ, then t
  C* G = dF + RB * ldf;      // dout, then dn (RB × ldv)
  C* O = G + RB * ldv;       // out
  C* stage = O + RB * ldv;   // 64 × lds
  C* diag = stage + kTile * lds;
  C* top = diag + RB;
  C* ties = top + RB;
  C* z = ties + RB;
  C* dz = z + RB;
  C* sums = dz + RB;
  unsigned char* flags = reinterpret_cast<unsigned char*>(sums + RB + kBlockThreads / 32);
  const long long size = static_cast<long long>(m) * e + m;
  const C* S = state + static_cast<long long>(bh) * size;
  const C* Sden = S + static_cast<long long>(m) * e;
  C* dS = ds_partial ? ds_partial + (static_cast<long long>(bh) * parts.count + part) * size : nullptr;
  if (dS) {
    for (long long idx = threadIdx.x; idx < size; idx += kBlockThreads) dS[idx] = 0;
  }
  const C alpha = a.alpha_q, beta = a.beta_q;
  const long long i_begin = part * parts.length, i_end = min(static_cast<long long>(a.L), i_begin + parts.length);
  for (long long i0 = i_begin; i0 < i_end; i0 += RB) {
    const int n = static_cast<int>(min(static_cast<long long>(RB), i_end - i0));
    __syncthreads();
    load_rows<C>(X, ldx, a.q, a.storage, b, h, i0, n, RB, d, d, a.x_scale);
    load_rows<C>(G, ldv, a.grad_out, a.storage, b, h, i0, n, RB, e, e_pad, C(1));
    load_rows<C>(O, ldv, a.out, a.storage, b, h, i0, n, RB, e, e_pad, C(1));
    __syncthreads();
    if (a.softmax) half_square_norms(diag, X, ldx, n, d);
    dash_rows<RR>(E, ldf, X, ldx, a.W, m, d, stage, lds);
    if (a.softmax) row_max(top, ties, E, ldf, n, m);
    __syncthreads();
    gate(E, ldf, n, m, a.softmax, diag, top, C(0), a.inv_sqrt_m, a.softmax ? flags : nullptr);
    __syncthreads();
    for (int i = warp_id(); i < n; i += kBlockThreads / 32) {  // z_i = φ(q_i)·S_den
      C s = 0;
      for (int f = lane_id(); f < m; f += 32) s += (alpha * (E[i * ldf + f] + beta)) * Sden[f];
      s = warp_sum(s);
      if (lane_id() == 0) z[i] = s;
    }
    __syncthreads();
    output_gradients(G, O, ldv, dz, z, n, e);
    __syncthreads();
    if (dS) {
      add_outer_sum(dS, m, e, n, [&](int i, int f) { return alpha * (E[i * ldf + f] + beta); }, G, ldv);
      for (int f = static_cast<int>(threadIdx.x); f < m; f += kBlockThreads) {
        C s = 0;
        for (int i = 0; i < n; ++i) s += dz[i] * (alpha * (E[i * ldf + f] + beta));
        dS[static_cast<long long>(m) * e + f] += s;
      }
    }
    if (!a.dq.data) continue;
    for (int f0 = 0; f0 < m; f0 += kTile) {  // dφ = dn·Sᵀ + dz ⊗ S_den
      __syncthreads();
      stage_rows(stage, lds, S, f0, m, e);
      __syncthreads();
      C acc[RR][4];
      zero(acc);
      product(acc, 0, e, [&](int i, int c) { return G[i * ldv + c]; },
              [&](int c, int j) { return stage[j * lds + c]; });
      for_tile(acc, [&](int i, int j, C value) {
        if (f0 + j < m) dF[i * ldf + f0 + j] = value + dz[i] * Sden[f0 + j];
      });
    }
    __syncthreads();
    features_grad(dF, E, ldf, n, m, a.softmax, alpha, a.inv_sqrt_m, sums, ties, flags);
    input_grad<RR>(a.dq, a.storage, b, h, i0, n, dF, ldf, X, ldx, sums, a.softmax, a.W, m, d, a.x_scale, stage, lds);
  }
}

template <class C>
__global__ void __launch_bounds__(kBlockThreads)
    sum_parts_kernel(const C* partial, int part_count, long long size, C* out) {
  const long long blocks_per_head = (size + kBlockThreads - 1) / kBlockThreads;
  const long long bh = blockIdx.x / blocks_per_head;
  const long long idx = static_cast<long long>(blockIdx.x % blocks_per_head) * kBlockThreads + threadIdx.x;
  if (idx >= size) return;
  C s = 0;
  for (int p = 0; p < part_count; ++p) s += partial[(bh * part_count + p) * size + idx];
  out[bh * size + idx] = s;
}

template <class C>
__global__ void __launch_bounds__(kBlockThreads)
    suffix_kernel(const C* partial, int part_count, long long size, C* after) {
  const long long blocks_per_head = (size + kBlockThreads - 1) / kBlockThreads;
  const long long bh = blockIdx.x / blocks_per_head;
  const long long idx = static_cast<long long>(blockIdx.x % blocks_per_head) * kBlockThreads + threadIdx.x;
  if (idx >= size) return;
  C s = 0;
  for (int p = part_count - 1; p >= 0; --p) {
    after[(bh * part_count + p) * size + idx] = s;
    s += partial[(bh * part_count + p) * size + idx];
  }
}

template <class C, int RR>
__global__ void __launch_bounds__(kBlockThreads)
    key_grad_kernel(Args<C> a, Parts parts, const C* ds, const C* constant, C* dc, long long* ties, int* tie_count,
                    int capacity) {
  extern __shared__ unsigned char smem_raw[];
  C* smem = reinterpret_cast<C*>(smem_raw);
  constexpr int RB = 16 * RR;
  const int part = static_cast<int>(blockIdx.x % parts.count), bh = static_cast<int>(blockIdx.x / parts.count);
  const int b = bh / a.H, h = bh % a.H, d = a.d, e = a.e, m = a.m, e_pad = padded(e);
  const int et_count = e_pad / kTile, dt_count = (d + kTile - 1) / kTile;
  const int ldx = d + 1, ldv = e_pad + 1, ldt = kTile + 1;
  C* X = smem;                // RB × ldx: x'
  C* V = X + RB * ldx;        // RB × ldv: w·v
  C* Wg = V + RB * ldv;       // 64 × ldx: the group's features
  C* dSg = Wg + kTile * ldx;  // 64 × ldv: the group's rows of dS
  C* Eg = dSg + kTile * ldv;  // RB × ldt: g
  C* Tg = Eg + RB * ldt;      // RB × ldt: dφ', then t
  C* diag = Tg + RB * ldt;
  C* kw = diag + RB;
  C* vw = kw + RB;
  C* sums = vw + RB;
  C* scratch = sums + 2 * RB;
  const long long size = static_cast<long long>(m) * e + m;
  const C* dS = ds + static_cast<long long>(bh) * size;
  const C* dSden = dS + static_cast<long long>(m) * e;
  const bool constant_grad = a.softmax && !a.causal;
  const C c = constant_grad ? constant[bh] : C(0);
  const C alpha = a.alpha_k, beta = a.beta_k;
  C dc_block = 0;
  const long long j_begin = part * parts.length, j_end = min(static_cast<long long>(a.S), j_begin + parts.length);
  for (long long j0 = j_begin; j0 < j_end; j0 += RB) {
    const int n = static_cast<int>(min(static_cast<long long>(RB), j_end - j0));
    __syncthreads();
    load_rows<C>(X, ldx, a.k, a.storage, b, h, j0, n, RB, d, d, a.x_scale);
    load_rows<C>(V, ldv, a.v, a.storage, b, h, j0, n, RB, e, e_pad, C(1));
    load_weights(kw, a.key_w, static_cast<long long>(b) * a.S, j0, n, RB);
    load_weights(vw, a.value_w, (static_cast<long long>(b) * a.H + h) * a.S, j0, n, RB);
    for (int i = static_cast<int>(threadIdx.x); i < RB; i += kBlockThreads) sums[i] = 0;
    __syncthreads();
    for (int idx = static_cast<int>(threadIdx.x); idx < RB * e_pad; idx += kBlockThreads) {
      V[(idx / e_pad) * ldv + idx % e_pad] *= vw[idx / e_pad];
    }
    if (a.softmax) half_square_norms(diag, X, ldx, n, d);
    C dv[kMaxValueTiles][RR][4], dk[kMaxValueTiles][RR][4];
#pragma unroll
    for (int u = 0; u < kMaxValueTiles; ++u) {
      zero(dv[u]);
      zero(dk[u]);
    }
    for (int f0 = 0; f0 < m; f0 += kTile) {
      const int kf = min(kTile, m - f0);
      __syncthreads();
      stage_features(Wg, ldx, a.W, f0, m, d);
      stage_rows(dSg, ldv, dS, f0, m, e);
      __syncthreads();
      C t[RR][4];
      zero(t);  // dash of the group
      product(t, 0, d, [&](int i, int p) { return X[i * ldx + p]; }, [&](int p, int j) { return Wg[j * ldx + p]; });
      for_tile(t, [&](int i, int j, C dash) {
        C g = 0;
        if (i < n && j < kf) {
          if (a.softmax) {
            g = exp_of((dash - diag[i]) - (a.causal ? *a.key_bound : c));
            if (constant_grad && dash == c) {  // an entry of the head's maximum
              const int slot = atomicAdd(tie_count + bh, 1);
              if (slot < capacity) ties[static_cast<long long>(bh) * capacity + slot] = (j0 + i) * m + f0 + j;
            }
          } else {
            const C u = dash * a.inv_sqrt_m;
            g = u > C(0) ? u : C(0);
          }
        }
        Eg[i * ldt + j] = g;
      });
      zero(t);  // dφ' = V'·dS_gᵀ + dS_den
      product(t, 0, e, [&](int i, int p) { return V[i * ldv + p]; }, [&](int p, int j) { return dSg[j * ldv + p]; });
      for_tile(t, [&](int i, int j, C value) { Tg[i * ldt + j] = j < kf ? value + dSden[f0 + j] : C(0); });
      __syncthreads();
#pragma unroll
      for (int u = 0; u < kMaxValueTiles; ++u) {  // d(w v) += φ'_g·dS_g
        if (u < et_count) {
          product(dv[u], 0, kf, [&](int i, int p) { return kw[i] * (alpha * (Eg[i * ldt + p] + beta)); },
                  [&](int p, int col) { return u * kTile + col < e ? dSg[p * ldv + u * kTile + col] : C(0); });
        }
      }
      __syncthreads();
      for (int idx = static_cast<int>(threadIdx.x); idx < RB * kTile; idx += kBlockThreads) {
        const int i = idx / kTile, j = idx % kTile;
        const C dphi = kw[i] * Tg[i * ldt + j], g = Eg[i * ldt + j];
        Tg[i * ldt + j] = a.softmax ? dphi * alpha * g : (g > C(0) ? dphi * alpha * a.inv_sqrt_m : C(0));
      }
      __syncthreads();
      for (int i = warp_id(); i < n; i += kBlockThreads / 32) {
        C s = 0;
        for (int j = lane_id(); j < kf; j += 32) s += Tg[i * ldt + j];
        s = warp_sum(s);
        if (lane_id() == 0) sums[i] += s;
      }
#pragma unroll
      for (int u = 0; u < kMaxValueTiles; ++u) {  // dx' += t_g·W_g
        if (u < dt_count) {
          product(dk[u], 0, kf, [&](int i, int p) { return Tg[i * ldt + p]; },
                  [&](int p, int col) { return u * kTile + col < d ? Wg[p * ldx + u * kTile + col] : C(0); });
        }
      }
    }
    __syncthreads();
#pragma unroll
    for (int u = 0; u < kMaxValueTiles; ++u) {
      if (u < et_count && a.dv.data) {
        for_tile(dv[u], [&](int i, int col, C value) {
          if (i < n && u * kTile + col < e) {
            store_element<C>(a.dv, a.storage, b, h, j0 + i, u * kTile + col, vw[i] * value);
          }
        });
      }
      if (u < dt_count && a.dk.data) {
        for_tile(dk[u], [&](int i, int col, C value) {
          if (i < n && u * kTile + col < d) {
            if (a.softmax) value -= sums[i] * X[i * ldx + u * kTile + col];
            store_element<C>(a.dk, a.storage, b, h, j0 + i, u * kTile + col, value * a.x_scale);
          }
        });
      }
    }
    if (constant_grad) {
      for (int i = static_cast<int>(threadIdx.x); i < n; i += kBlockThreads) dc_block -= sums[i];
    }
  }
  if (constant_grad) {
    const C total = block_sum(dc_block, scratch);
    if (threadIdx.x == 0) dc[static_cast<long long>(bh) * parts.count + part] = total;
  }
}

template <class C>
__global__ void __launch_bounds__(kBlockThreads)
    tie_fixup_kernel(Args<C> a, int part_count, const C* constant, const C* dc, const long long* ties,
                     const int* tie_count, int capacity) {
  extern __shared__ unsigned char smem_raw[];
  C* x = reinterpret_cast<C*>(smem_raw);  // one key's x' (d)
  __shared__ int hits;
  const int bh = static_cast<int>(blockIdx.x), b = bh / a.H, h = bh % a.H, d = a.d, m = a.m;
  const int count = tie_count[bh];
  if (count == 0 || !a.dk.data) return;
  C total = 0;
  for (int p = 0; p < part_count; ++p) total += dc[static_cast<long long>(bh) * part_count + p];
  const C share = total / static_cast<C>(count);
  const auto apply = [&](long long j, int f) {  // dk_j += x_scale·share·W_f, one row at a time
    for (int col = static_cast<int>(threadIdx.x); col < d; col += kBlockThreads) {
      const C value = load_element<C>(a.dk, a.storage, b, h, j, col) +
                      a.x_scale * share * a.W[static_cast<long long>(f) * d + col];
      store_element<C>(a.dk, a.storage, b, h, j, col, value);
    }
    __syncthreads();
  };
  if (count <= capacity) {
    for (int t = 0; t < count; ++t) {
      const long long entry = ties[static_cast<long long>(bh) * capacity + t];
      apply(entry / m, static_cast<int>(entry % m));
    }
    return;
  }
  // The list overflowed: find the entries again, with key_grad_kernel's products (same order).
  const C c = constant[bh];
  for (long long j = 0; j < a.S; ++j) {
    __syncthreads();
    for (int col = static_cast<int>(threadIdx.x); col < d; col += kBlockThreads) {
      x[col] = load_element<C>(a.k, a.storage, b, h, j, col) * a.x_scale;
    }
    if (threadIdx.x == 0) hits = 0;
    __syncthreads();
    for (int f = static_cast<int>(threadIdx.x); f < m; f += kBlockThreads) {
      C dash = 0;
      for (int p = 0; p < d; ++p) dash += x[p] * a.W[static_cast<long long>(f) * d + p];
      if (dash == c) atomicAdd(&hits, 1);
    }
    __syncthreads();
    const int found = hits;
    __syncthreads();
    if (found == 0) continue;
    for (int f = 0; f < m; ++f) {  // rare: the row's tied features one by one
      if (threadIdx.x == 0) {
        C dash = 0;
        for (int p = 0; p < d; ++p) dash += x[p] * a.W[static_cast<long long>(f) * d + p];
        hits = dash == c ? 1 : 0;
      }
      __syncthreads();
      const int tied = hits;
      __syncthreads();
      if (tied) apply(j, f);
    }
  }
}

template <class C>
void launch_key_grad(const Args<C>& args, Parts parts, const C* ds, const C* constant, C* dc, long long* ties,
                     int* tie_count, int capacity, int rr, std::size_t smem, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(parts.count) * args.B * args.H);
  const auto kernel = rr == 4 ? key_grad_kernel<C, 4> : rr == 2 ? key_grad_kernel<C, 2>
                                                                    : key_grad_kernel<C, 1>;
  allow_smem(kernel, smem);
  kernel<<<grid, kBlockThreads, smem, stream>>>(args, parts, ds, constant, dc, ties, tie_count, capacity);
  check(cudaGetLastError(), "key_grad_kernel");
}

template <class C>
void launch_tie_fixup(const Args<C>& args, int part_count, const C* constant, const C* dc, const long long* ties,
                      const int* tie_count, int capacity, cudaStream_t stream) {
  tie_fixup_kernel<C><<<args.B * args.H, kBlockThreads, sizeof(C) * args.d, stream>>>(
      args, part_count, constant, dc, ties, tie_count, capacity);
  check(cudaGetLastError(), "tie_fixup_kernel");
}

template <class C>
void launch_sum_parts(const C* partial, int heads, int part_count, long long size, C* out, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((size + kBlockThreads - 1) / kBlockThreads * heads));
  sum_parts_kernel<C><<<grid, kBlockThreads, 0, stream>>>(partial, part_count, size, out);
  check(cudaGetLastError(), "sum_parts_kernel");
}

template <class C>
void launch_suffix(const C* partial, int heads, int part_count, long long size, C* after, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((size + kBlockThreads - 1) / kBlockThreads * heads));
  suffix_kernel<C><<<grid, kBlockThreads, 0, stream>>>(partial, part_count, size, after);
  check(cudaGetLastError(), "suffix_kernel");
}

template <class C>
void launch_query_grad(const Args<C>& args, Parts parts, const C* state, C* ds_partial, int rr, std::size_t smem,
                       cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(parts.count) * args.B * args.H);
  const auto kernel = rr == 4 ? query_grad_kernel<C, 4> : rr == 2 ? query_grad_kernel<C, 2>
                                                                      : query_grad_kernel<C, 1>;
  allow_smem(kernel, smem);
  kernel<<<grid, kBlockThreads, smem, stream>>>(args, parts, state, ds_partial);
  check(cudaGetLastError(), "query_grad_kernel");
}

#define SKETCHCORE_PERFORMER_BACKWARD(C)                                                                     \
  template void launch_query_grad<C>(const Args<C>&, Parts, const C*, C*, int, std::size_t, cudaStream_t); \
  template void launch_key_grad<C>(const Args<C>&, Parts, const C*, const C*, C*, long long*, int*, int, int, \
                                      std::size_t, cudaStream_t);                                               \
  template void launch_tie_fixup<C>(const Args<C>&, int, const C*, const C*, const long long*, const int*,  \
                                       int,                                                                     \
                                       cudaStream_t);

SKETCHCORE_PERFORMER_BACKWARD(float)
SKETCHCORE_PERFORMER_BACKWARD(double)

template void launch_sum_parts<float>(const float*, int, int, long long, float*, cudaStream_t);
template void launch_sum_parts<double>(const double*, int, int, long long, double*, cudaStream_t);
template void launch_suffix<float>(const float*, int, int, long long, float*, cudaStream_t);
template void launch_suffix<double>(const double*, int, int, long long, double*, cudaStream_t);

}  // namespace sketchcore::cuda::performer
