// CUDA Performer attention, causal backward kernels (host side: performer_cuda.cu; the formulas:
// cpu/performer_backward_cpu.cpp). Every block owns one part of a head's chunks and a running state
// in global scratch:
//
//   causal_grad_q_kernel   forward direction from the state before the part: z, dn, dz (kept in
//                          `saved`, L × (e + 1) per head), dP = dn·V'ᵀ + dz on j ≤ i, and
//                          dφ(q) = dn·Sᵀ + dz ⊗ S_den + dP·φ'(K), then dq; S += φ'(K)ᵀ·V'.
//   causal_r_parts_kernel  per part R = Σ_i φ(q_i) ⊗ dn_i and R_den = Σ_i dz_i·φ(q_i) (their suffix
//                          sums over later parts: suffix_kernel).
//   causal_grad_kv_kernel  reverse direction from the suffix: d(w v) = φ'(K)·R + Pᵀ·dn,
//                          dφ'(k) = V'·Rᵀ + R_den + dPᵀ·φ(Q), then dk and dv; R += φ(Q)ᵀ·dn.
#include "performer_grad.cuh"
#include "performer_kernels.cuh"

namespace sketchcore::cuda::performer {

namespace {

/// Shared-memory layout of the causal backward kernels (C elements, then flag bytes).
template <class C, int RB>
struct CausalSmem {
  C *X, *F1, *F2, *F3, *V, *G, *O, *P, *dP, *stage, *diag, *top, *ties, *kw, *vw, *z, *dz, *sums;
  unsigned char* flags;
  int ldx, ldf, ldv, ldp, lds;

  __device__ CausalSmem(unsigned char* raw, int d, int e_pad, int m) {
    ldx = d + 1;
    ldf = m + 1;
    ldv = e_pad + 1;
    ldp = kTile + 1;
    lds = max(d, e_pad) + 1;
    X = reinterpret_cast<C*>(raw);
    F1 = X + RB * ldx;
    F2 = F1 + RB * ldf;
    F3 = F2 + RB * ldf;
    V = F3 + RB * ldf;
    G = V + RB * ldv;
    O = G + RB * ldv;
    P = O + RB * ldv;
    dP = P + RB * ldp;
    stage = dP + RB * ldp;
    diag = stage + kTile * lds;
    top = diag + RB;
    ties = top + RB;
    kw = ties + RB;
    vw = kw + RB;
    z = vw + RB;
    dz = z + RB;
    sums = dz + RB;
    flags = reinterpret_cast<unsigned char*>(sums + RB);
  }
};

/// Query rows [t0, t0 + n): x' into s.X, dash and then g into `g` (with the maxima's flags and
/// counts when `flags`), φ into `phi` when not null.
template <int RR, class C>
__device__ void query_block(const Args<C>& a, int b, int h, long long t0, int n, CausalSmem<C, 16 * RR>& s, C* g,
                            C* phi, bool flags) {
  constexpr int RB = 16 * RR;
  load_rows<C>(s.X, s.ldx, a.q, a.storage, b, h, t0, n, RB, a.d, a.d, a.x_scale);
  __syncthreads();
  if (a.softmax) half_square_norms(s.diag, s.X, s.ldx, n, a.d);
  dash_rows<RR>(g, s.ldf, s.X, s.ldx, a.W, a.m, a.d, s.stage, s.lds);
  if (a.softmax) row_max(s.top, flags ? s.ties : static_cast<C*>(nullptr), g, s.ldf, n, a.m);
  __syncthreads();
  gate(g, s.ldf, n, a.m, a.softmax, s.diag, s.top, C(0), a.inv_sqrt_m, flags && a.softmax ? s.flags : nullptr);
  __syncthreads();
  if (phi) {
    for (int idx = static_cast<int>(threadIdx.x); idx < n * a.m; idx += kBlockThreads) {
      const int i = idx / a.m, f = idx % a.m;
      phi[i * s.ldf + f] = a.alpha_q * (g[i * s.ldf + f] + a.beta_q);
    }
    __syncthreads();
  }
}

/// Key rows [t0, t0 + n): x' into s.X, g (the causal key exponentials, or relu) into `g`, φ' =
/// a·α(g + β) into `phi` when not null; the key and value weights into s.kw, s.vw; w·v into s.V.
template <int RR, class C>
__device__ void key_block(const Args<C>& a, int b, int h, long long t0, int n, CausalSmem<C, 16 * RR>& s, C* g,
                          C* phi) {
  constexpr int RB = 16 * RR;
  const int e_pad = padded(a.e);
  load_rows<C>(s.X, s.ldx, a.k, a.storage, b, h, t0, n, RB, a.d, a.d, a.x_scale);
  load_rows<C>(s.V, s.ldv, a.v, a.storage, b, h, t0, n, RB, a.e, e_pad, C(1));
  load_weights(s.kw, a.key_w, static_cast<long long>(b) * a.S, t0, n, RB);
  load_weights(s.vw, a.value_w, (static_cast<long long>(b) * a.H + h) * a.S, t0, n, RB);
  __syncthreads();
  for (int idx = static_cast<int>(threadIdx.x); idx < RB * e_pad; idx += kBlockThreads) {
    s.V[(idx / e_pad) * s.ldv + idx % e_pad] *= s.vw[idx / e_pad];
  }
  if (a.softmax) half_square_norms(s.diag, s.X, s.ldx, n, a.d);
  dash_rows<RR>(g, s.ldf, s.X, s.ldx, a.W, a.m, a.d, s.stage, s.lds);
  gate(g, s.ldf, n, a.m, a.softmax, s.diag, static_cast<const C*>(nullptr), a.softmax ? *a.key_bound : C(0),
       a.inv_sqrt_m, static_cast<unsigned char*>(nullptr));
  __syncthreads();
  if (phi) {
    for (int idx = static_cast<int>(threadIdx.x); idx < n * a.m; idx += kBlockThreads) {
      const int i = idx / a.m, f = idx % a.m;
      phi[i * s.ldf + f] = s.kw[i] * (a.alpha_k * (g[i * s.ldf + f] + a.beta_k));
    }
    __syncthreads();
  }
}

/// out(i, j) = masked product Σ_p a(i, p)·b(j, p) over p < k, kept where j ≤ i < n (and j < n),
/// plus `diag_add(i)` on those entries; 0 elsewhere.
template <int RR, class C, class FA, class FB, class Add>
__device__ void masked_square(C* out, int ld, int n, int k, FA a, FB bt, Add add) {
  constexpr int RB = 16 * RR;
  C acc[RR][4];
  zero(acc);
  product(acc, 0, k, a, [&](int p, int j) { return j < RB ? bt(j, p) : C(0); });
  for_tile(acc, [&](int i, int j, C value) {
    if (j < RB) out[i * ld + j] = j <= i && j < n && i < n ? value + add(i) : C(0);
  });
  __syncthreads();
}

}  // namespace

template <class C, int RR>
__global__ void __launch_bounds__(kBlockThreads)
    causal_grad_q_kernel(Args<C> a, Parts parts, const C* state_before, C* running, C* saved) {
  extern __shared__ unsigned char smem_raw[];
  constexpr int RB = 16 * RR;
  const int part = static_cast<int>(blockIdx.x % parts.count), bh = static_cast<int>(blockIdx.x / parts.count);
  const int b = bh / a.H, h = bh % a.H, e = a.e, m = a.m, e_pad = padded(e);
  CausalSmem<C, RB> s(smem_raw, a.d, e_pad, m);
  C *Eq = s.F1, *Fk = s.F2, *dF = s.F3;
  const long long size = static_cast<long long>(m) * e + m;
  C* S = running + (static_cast<long long>(bh) * parts.count + part) * size;
  const C* before = state_before + (static_cast<long long>(bh) * parts.count + part) * size;
  for (long long idx = threadIdx.x; idx < size; idx += kBlockThreads) S[idx] = before[idx];
  C* dsave = saved + static_cast<long long>(bh) * a.L * (e + 1);
  const long long t_begin = part * parts.length, t_end = min(static_cast<long long>(a.L), t_begin + parts.length);
  for (long long t0 = t_begin; t0 < t_end; t0 += RB) {
    const int n = static_cast<int>(min(static_cast<long long>(RB), t_end - t0));
    __syncthreads();
    key_block<RR>(a, b, h, t0, n, s, Fk, Fk);
    query_block<RR>(a, b, h, t0, n, s, Eq, static_cast<C*>(nullptr), true);
    const auto phi_q = [&](int i, int f) { return a.alpha_q * (Eq[i * s.ldf + f] + a.beta_q); };
    masked_square<RR>(s.P, s.ldp, n, m, phi_q, [&](int j, int p) { return Fk[j * s.ldf + p]; },
                      [](int) { return C(0); });
    load_rows<C>(s.G, s.ldv, a.grad_out, a.storage, b, h, t0, n, RB, e, e_pad, C(1));
    load_rows<C>(s.O, s.ldv, a.out, a.storage, b, h, t0, n, RB, e, e_pad, C(1));
    for (int i = warp_id(); i < n; i += kBlockThreads / 32) {  // z = φ(q)·S_den + Σ_{j ≤ i} P
      C sum = 0;
      for (int f = lane_id(); f < m; f += 32) sum += phi_q(i, f) * S[static_cast<long long>(m) * e + f];
      for (int j = lane_id(); j <= i; j += 32) sum += s.P[i * s.ldp + j];
      sum = warp_sum(sum);
      if (lane_id() == 0) s.z[i] = sum;
    }
    __syncthreads();
    output_gradients(s.G, s.O, s.ldv, s.dz, s.z, n, e);
    __syncthreads();
    for (int idx = static_cast<int>(threadIdx.x); idx < n * (e + 1); idx += kBlockThreads) {
      const int i = idx / (e + 1), c = idx % (e + 1);
      dsave[(t0 + i) * (e + 1) + c] = c < e ? s.G[i * s.ldv + c] : s.dz[i];
    }
    if (a.dq.data) {
      masked_square<RR>(s.dP, s.ldp, n, e, [&](int i, int c) { return s.G[i * s.ldv + c]; },
                        [&](int j, int c) { return s.V[j * s.ldv + c]; }, [&](int i) { return s.dz[i]; });
      for (int f0 = 0; f0 < m; f0 += kTile) {  // dφ(q) = dn·Sᵀ + dz ⊗ S_den + dP·φ'(K)
        __syncthreads();
        stage_rows(s.stage, s.lds, S, f0, m, e);
        __syncthreads();
        C acc[RR][4];
        zero(acc);
        product(acc, 0, e, [&](int i, int c) { return s.G[i * s.ldv + c]; },
                [&](int c, int j) { return s.stage[j * s.lds + c]; });
        product(acc, 0, n, [&](int i, int j) { return s.dP[i * s.ldp + j]; },
                [&](int j, int f) { return f0 + f < m ? Fk[j * s.ldf + f0 + f] : C(0); });
        for_tile(acc, [&](int i, int j, C value) {
          if (f0 + j < m) dF[i * s.ldf + f0 + j] = value + s.dz[i] * S[static_cast<long long>(m) * e + f0 + j];
        });
      }
      __syncthreads();
      features_grad(dF, Eq, s.ldf, n, m, a.softmax, a.alpha_q, a.inv_sqrt_m, s.sums, s.ties, s.flags);
      input_grad<RR>(a.dq, a.storage, b, h, t0, n, dF, s.ldf, s.X, s.ldx, s.sums, a.softmax, a.W, m, a.d, a.x_scale,
                     s.stage,
                     s.lds);
    }
    __syncthreads();
    add_outer_sum(S, m, e, n, [&](int j, int f) { return Fk[j * s.ldf + f]; }, s.V, s.ldv);
    for (int f = static_cast<int>(threadIdx.x); f < m; f += kBlockThreads) {
      C sum = 0;
      for (int j = 0; j < n; ++j) sum += Fk[j * s.ldf + f];
      S[static_cast<long long>(m) * e + f] += sum;
    }
  }
}

template <class C, int RR>
__global__ void __launch_bounds__(kBlockThreads)
    causal_r_parts_kernel(Args<C> a, Parts parts, const C* saved, C* partial) {
  extern __shared__ unsigned char smem_raw[];
  constexpr int RB = 16 * RR;
  const int part = static_cast<int>(blockIdx.x % parts.count), bh = static_cast<int>(blockIdx.x / parts.count);
  const int b = bh / a.H, h = bh % a.H, e = a.e, m = a.m, e_pad = padded(e);
  CausalSmem<C, RB> s(smem_raw, a.d, e_pad, m);
  const long long size = static_cast<long long>(m) * e + m;
  C* R = partial + (static_cast<long long>(bh) * parts.count + part) * size;
  for (long long idx = threadIdx.x; idx < size; idx += kBlockThreads) R[idx] = 0;
  const C* dsave = saved + static_cast<long long>(bh) * a.L * (e + 1);
  const long long t_begin = part * parts.length, t_end = min(static_cast<long long>(a.L), t_begin + parts.length);
  for (long long t0 = t_begin; t0 < t_end; t0 += RB) {
    const int n = static_cast<int>(min(static_cast<long long>(RB), t_end - t0));
    __syncthreads();
    query_block<RR>(a, b, h, t0, n, s, s.F1, s.F1, false);
    for (int idx = static_cast<int>(threadIdx.x); idx < RB * e_pad; idx += kBlockThreads) {
      const int i = idx / e_pad, c = idx % e_pad;
      s.G[i * s.ldv + c] = i < n && c < e ? dsave[(t0 + i) * (e + 1) + c] : C(0);
    }
    for (int i = static_cast<int>(threadIdx.x); i < RB; i += kBlockThreads) {
      s.dz[i] = i < n ? dsave[(t0 + i) * (e + 1) + e] : C(0);
    }
    __syncthreads();
    add_outer_sum(R, m, e, n, [&](int i, int f) { return s.F1[i * s.ldf + f]; }, s.G, s.ldv);
    for (int f = static_cast<int>(threadIdx.x); f < m; f += kBlockThreads) {
      C sum = 0;
      for (int i = 0; i < n; ++i) sum += s.dz[i] * s.F1[i * s.ldf + f];
      R[static_cast<long long>(m) * e + f] += sum;
    }
  }
}

template <class C, int RR>
__global__ void __launch_bounds__(kBlockThreads)
    causal_grad_kv_kernel(Args<C> a, Parts parts, const C* r_after, C* running, const C* saved) {
  extern __shared__ unsigned char smem_raw[];
  constexpr int RB = 16 * RR;
  const int part = static_cast<int>(blockIdx.x % parts.count), bh = static_cast<int>(blockIdx.x / parts.count);
  const int b = bh / a.H, h = bh % a.H, d = a.d, e = a.e, m = a.m, e_pad = padded(e);
  const int et_count = e_pad / kTile;
  CausalSmem<C, RB> s(smem_raw, d, e_pad, m);
  C *Fq = s.F1, *Ek = s.F2, *dF = s.F3;
  const long long size = static_cast<long long>(m) * e + m;
  C* R = running + (static_cast<long long>(bh) * parts.count + part) * size;
  const C* after = r_after + (static_cast<long long>(bh) * parts.count + part) * size;
  for (long long idx = threadIdx.x; idx < size; idx += kBlockThreads) R[idx] = after[idx];
  const C* dsave = saved + static_cast<long long>(bh) * a.L * (e + 1);
  const long long t_begin = part * parts.length, t_end = min(static_cast<long long>(a.L), t_begin + parts.length);
  const long long last = t_begin + (t_end - t_begin - 1) / RB * RB;
  for (long long t0 = last; t0 >= t_begin && t_end > t_begin; t0 -= RB) {
    const int n = static_cast<int>(min(static_cast<long long>(RB), t_end - t0));
    __syncthreads();
    query_block<RR>(a, b, h, t0, n, s, Fq, Fq, false);
    key_block<RR>(a, b, h, t0, n, s, Ek, static_cast<C*>(nullptr));  // s.X keeps the keys' x'
    for (int idx = static_cast<int>(threadIdx.x); idx < RB * e_pad; idx += kBlockThreads) {
      const int i = idx / e_pad, c = idx % e_pad;
      s.G[i * s.ldv + c] = i < n && c < e ? dsave[(t0 + i) * (e + 1) + c] : C(0);
    }
    for (int i = static_cast<int>(threadIdx.x); i < RB; i += kBlockThreads) {
      s.dz[i] = i < n ? dsave[(t0 + i) * (e + 1) + e] : C(0);
    }
    __syncthreads();
    const auto phi_k = [&](int j, int f) { return s.kw[j] * (a.alpha_k * (Ek[j * s.ldf + f] + a.beta_k)); };
    masked_square<RR>(s.P, s.ldp, n, m, [&](int i, int f) { return Fq[i * s.ldf + f]; }, phi_k,
                      [](int) { return C(0); });
    masked_square<RR>(s.dP, s.ldp, n, e, [&](int i, int c) { return s.G[i * s.ldv + c]; },
                      [&](int j, int c) { return s.V[j * s.ldv + c]; }, [&](int i) { return s.dz[i]; });
    C dv[kMaxValueTiles][RR][4];
#pragma unroll
    for (int u = 0; u < kMaxValueTiles; ++u) zero(dv[u]);
    for (int f0 = 0; f0 < m; f0 += kTile) {  // d(w v) = φ'(K)·R + Pᵀ·dn; dφ'(k) = V'·Rᵀ + R_den + dPᵀ·φ(Q)
      const int kf = min(kTile, m - f0);
      __syncthreads();
      stage_rows(s.stage, s.lds, R, f0, m, e);
      __syncthreads();
#pragma unroll
      for (int u = 0; u < kMaxValueTiles; ++u) {
        if (u < et_count) {
          product(dv[u], 0, kf, [&](int j, int f) { return phi_k(j, f0 + f); },
                  [&](int f, int c) { return u * kTile + c < e ? s.stage[f * s.lds + u * kTile + c] : C(0); });
        }
      }
      C acc[RR][4];
      zero(acc);
      product(acc, 0, e, [&](int j, int c) { return s.V[j * s.ldv + c]; },
              [&](int c, int f) { return s.stage[f * s.lds + c]; });
      product(acc, 0, n, [&](int j, int i) { return s.dP[i * s.ldp + j]; },
              [&](int i, int f) { return f0 + f < m ? Fq[i * s.ldf + f0 + f] : C(0); });
      for_tile(acc, [&](int j, int f, C value) {
        if (f0 + f < m) dF[j * s.ldf + f0 + f] = s.kw[j] * (value + R[static_cast<long long>(m) * e + f0 + f]);
      });
    }
#pragma unroll
    for (int u = 0; u < kMaxValueTiles; ++u) {
      if (u < et_count) {
        product(dv[u], 0, n, [&](int j, int i) { return s.P[i * s.ldp + j]; },
                [&](int i, int c) { return s.G[i * s.ldv + u * kTile + c]; });
        if (a.dv.data) {
          for_tile(dv[u], [&](int j, int c, C value) {
            if (j < n && u * kTile + c < e) {
              store_element<C>(a.dv, a.storage, b, h, t0 + j, u * kTile + c, s.vw[j] * value);
            }
          });
        }
      }
    }
    __syncthreads();
    if (a.dk.data) {
      features_grad(dF, Ek, s.ldf, n, m, a.softmax, a.alpha_k, a.inv_sqrt_m, s.sums, s.ties,
                    static_cast<const unsigned char*>(nullptr));
      input_grad<RR>(a.dk, a.storage, b, h, t0, n, dF, s.ldf, s.X, s.ldx, s.sums, a.softmax, a.W, m, d, a.x_scale,
                     s.stage,
                     s.lds);
    }
    __syncthreads();
    add_outer_sum(R, m, e, n, [&](int i, int f) { return Fq[i * s.ldf + f]; }, s.G, s.ldv);
    for (int f = static_cast<int>(threadIdx.x); f < m; f += kBlockThreads) {
      C sum = 0;
      for (int i = 0; i < n; ++i) sum += s.dz[i] * Fq[i * s.ldf + f];
      R[static_cast<long long>(m) * e + f] += sum;
    }
  }
}

#define SKETCHCORE_PERFORMER_CAUSAL_LAUNCH(NAME, KERNEL, PARAMS, ARGS)                                         \
  template <class C>                                                                                  \
  void NAME PARAMS {                                                                                           \
    const dim3 grid(static_cast<unsigned>(parts.count) * args.B * args.H);                                    \
    const auto kernel = rr == 4 ? KERNEL<C, 4> : rr == 2 ? KERNEL<C, 2> : KERNEL<C, 1>;              \
    allow_smem(kernel, smem);                                                                                  \
    kernel<<<grid, kBlockThreads, smem, stream>>> ARGS;                                                        \
    check(cudaGetLastError(), #KERNEL);                                                                        \
  }

SKETCHCORE_PERFORMER_CAUSAL_LAUNCH(launch_causal_grad_q, causal_grad_q_kernel,
                                   (const Args<C>& args, Parts parts, const C* state_before, C* running, C* saved,
                                    int rr, std::size_t smem, cudaStream_t stream),
                                   (args, parts, state_before, running, saved))
SKETCHCORE_PERFORMER_CAUSAL_LAUNCH(launch_causal_r_parts, causal_r_parts_kernel,
                                   (const Args<C>& args, Parts parts, const C* saved, C* partial, int rr,
                                    std::size_t smem, cudaStream_t stream),
                                   (args, parts, saved, partial))
SKETCHCORE_PERFORMER_CAUSAL_LAUNCH(launch_causal_grad_kv, causal_grad_kv_kernel,
                                   (const Args<C>& args, Parts parts, const C* r_after, C* running,
                                    const C* saved, int rr, std::size_t smem, cudaStream_t stream),
                                   (args, parts, r_after, running, saved))

#define SKETCHCORE_PERFORMER_CAUSAL_BACKWARD(C)                                                               \
  template void launch_causal_grad_q<C>(const Args<C>&, Parts, const C*, C*, C*, int, std::size_t,         \
                                           cudaStream_t);                                                       \
  template void launch_causal_r_parts<C>(const Args<C>&, Parts, const C*, C*, int, std::size_t,            \
                                            cudaStream_t);                                                      \
  template void launch_causal_grad_kv<C>(const Args<C>&, Parts, const C*, C*, const C*, int, std::size_t,  \
                                            cudaStream_t);

SKETCHCORE_PERFORMER_CAUSAL_BACKWARD(float)
SKETCHCORE_PERFORMER_CAUSAL_BACKWARD(double)

}  // namespace sketchcore::cuda::performer
