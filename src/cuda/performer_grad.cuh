// Device pieces of the CUDA Performer backward kernels (performer_backward.cu,
// performer_causal_backward.cu): the feature map's backward on a block of rows, the gradient of
// the rows' inputs through the random features, and sums of outer products into a block-owned
// state.
#pragma once

#include "performer_device.cuh"

namespace sketchcore::cuda::performer {

/// Softmax: t = dF·α·g and, for rows whose maximum's entries are flagged, the maximum's gradient
/// −Σ_f t split evenly among them; relu: t = dF·α·m^(−1/2) where g > 0. In place on dF; sums[i]
/// gets Σ_f t (before the split: the |x'|²/2 term's gradient is its negative).
template <class C>
__device__ void features_grad(C* dF, const C* g, int ldf, int rows, int m, bool softmax, C alpha, C inv_sqrt_m,
                              C* sums, const C* ties, const unsigned char* flags) {
  for (int idx = static_cast<int>(threadIdx.x); idx < rows * m; idx += kBlockThreads) {
    const int i = idx / m, f = idx % m;
    const C value = dF[i * ldf + f];
    if (softmax) {
      dF[i * ldf + f] = value * alpha * g[i * ldf + f];
    } else {
      dF[i * ldf + f] = g[i * ldf + f] > C(0) ? value * alpha * inv_sqrt_m : C(0);
    }
  }
  __syncthreads();
  if (!softmax) return;
  for (int i = warp_id(); i < rows; i += kBlockThreads / 32) {
    C s = 0;
    for (int f = lane_id(); f < m; f += 32) s += dF[i * ldf + f];
    s = warp_sum(s);
    if (lane_id() == 0) sums[i] = s;
  }
  __syncthreads();
  if (!flags) return;
  for (int idx = static_cast<int>(threadIdx.x); idx < rows * m; idx += kBlockThreads) {
    const int i = idx / m, f = idx % m;
    if (flags[i * ldf + f]) dF[i * ldf + f] += -sums[i] / ties[i];
  }
  __syncthreads();
}

/// dx' = t·W (− sums_i·x'_i for softmax), times x_scale, into rows [row0, row0 + n) of `dst`.
template <int RR, class C>
__device__ void input_grad(const Heads& dst, Storage storage, int b, int h, long long row0, int n, const C* t, int ldf,
                           const C* x,
                           int ldx, const C* sums, bool softmax, const C* W, int m, int d, C x_scale, C* stage,
                           int lds) {
  const int dt_count = (d + kTile - 1) / kTile;
  C acc[kMaxValueTiles][RR][4];
#pragma unroll
  for (int u = 0; u < kMaxValueTiles; ++u) zero(acc[u]);
  for (int f0 = 0; f0 < m; f0 += kTile) {
    __syncthreads();
    stage_features(stage, lds, W, f0, m, d);
    __syncthreads();
    const int kf = min(kTile, m - f0);
#pragma unroll
    for (int u = 0; u < kMaxValueTiles; ++u) {
      if (u < dt_count) {
        product(acc[u], 0, kf, [&](int i, int p) { return t[i * ldf + f0 + p]; },
                [&](int p, int c) { return u * kTile + c < d ? stage[p * lds + u * kTile + c] : C(0); });
      }
    }
  }
#pragma unroll
  for (int u = 0; u < kMaxValueTiles; ++u) {
    if (u < dt_count) {
      for_tile(acc[u], [&](int i, int c, C value) {
        const int col = u * kTile + c;
        if (i < n && col < d) {
          if (softmax) value -= sums[i] * x[i * ldx + col];
          store_element<C>(dst, storage, b, h, row0 + i, col, value * x_scale);
        }
      });
    }
  }
}
/// acc(f, c) += Σ_{i < n} a(i, f)·rows[i][c] for the 64 × 64 tiles of an (m × e) sum, added into
/// `target` (owned by the block): a(i, f) gives the features, `rows` (n × e, ld) the values.
template <class C, class FA>
__device__ void add_outer_sum(C* target, int m, int e, int n, FA a, const C* rows, int ld) {
  const int et_count = (e + kTile - 1) / kTile;
  for (int f0 = 0; f0 < m; f0 += kTile) {
    for (int u = 0; u < et_count; ++u) {
      C acc[4][4];
      zero(acc);
      product(acc, 0, n, [&](int f, int p) { return f0 + f < m ? a(p, f0 + f) : C(0); },
              [&](int p, int c) { return u * kTile + c < e ? rows[p * ld + u * kTile + c] : C(0); });
      for_tile(acc, [&](int f, int c, C value) {
        if (f0 + f < m && u * kTile + c < e) target[static_cast<long long>(f0 + f) * e + u * kTile + c] += value;
      });
    }
  }
}

}  // namespace sketchcore::cuda::performer
