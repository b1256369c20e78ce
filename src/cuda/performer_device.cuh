// Device building blocks of the CUDA Performer kernels (performer_forward.cu, performer_backward.cu):
// the kernels' arguments, cooperative loads of a head's rows into shared memory, the block-tile
// product every step is made of, and the feature map's element-wise pieces.
//
// A thread block has 256 threads seen as 16 × 16 (ty, tx). An output tile has RB rows (a block of
// tokens, RB = 16·RR) or 64 rows (features) and 64 columns; thread (ty, tx) owns rows ty + 16·r
// (r < RR) and columns tx + 16·c (c < 4) and accumulates them in registers (C: float, or double
// for float64 problems). Shared-memory arrays have odd leading dimensions (cols + 1) so that both
// row and column walks are free of bank conflicts.
//
// Notation (cpu/performer_cpu.hpp): x' = x·x_scale, dash = x'·Wᵀ, diag = |x'|²/2, φ = α(g + β).
#pragma once

#include <cstdint>

#include "cuda_common.cuh"

namespace sketchcore::cuda::performer {

constexpr int kBlockThreads = 256;
constexpr int kTile = 64;  // columns of an output tile; features are processed in groups of 64
constexpr int kMaxValueTiles = 4;  // d, e ≤ 256 on CUDA

/// `cols` rounded up to whole tiles.
__host__ __device__ inline int padded(int cols) { return (cols + kTile - 1) / kTile * kTile; }

/// The element type of q, k, v, out and the gradients. The kernels are compiled once per compute
/// type C (float for the first three, double for float64) and read and write the storage type
/// through a switch (a branch the whole grid takes the same way), not once per storage type: the
/// 16-bit and float32 problems share every kernel.
enum class Storage : int { f16, bf16, f32, f64 };

/// A (B, H, rows, cols) tensor: element (b, h, i, c) at data + b·sb + h·sh + i·sr + c·sc elements.
struct Heads {
  void* data = nullptr;
  long long sb = 0, sh = 0, sr = 0, sc = 0;
  __device__ long long offset(int b, int h, long long i, int c) const { return b * sb + h * sh + i * sr + c * sc; }
};

/// Element (b, h, i, c) of `t` in C.
template <class C>
__device__ __forceinline__ C load_element(const Heads& t, Storage s, int b, int h, long long i, int c) {
  const long long o = t.offset(b, h, i, c);
  switch (s) {
    case Storage::f16: return static_cast<C>(__half2float(static_cast<const __half*>(t.data)[o]));
    case Storage::bf16: return static_cast<C>(__bfloat162float(static_cast<const __nv_bfloat16*>(t.data)[o]));
    case Storage::f32: return static_cast<C>(static_cast<const float*>(t.data)[o]);
    case Storage::f64: break;
  }
  return static_cast<C>(static_cast<const double*>(t.data)[o]);
}

/// Element (b, h, i, c) of `t` = value, rounded to the storage type.
template <class C>
__device__ __forceinline__ void store_element(const Heads& t, Storage s, int b, int h, long long i, int c, C value) {
  const long long o = t.offset(b, h, i, c);
  switch (s) {
    case Storage::f16: static_cast<__half*>(t.data)[o] = __float2half_rn(static_cast<float>(value)); return;
    case Storage::bf16:
      static_cast<__nv_bfloat16*>(t.data)[o] = __float2bfloat16_rn(static_cast<float>(value));
      return;
    case Storage::f32: static_cast<float*>(t.data)[o] = static_cast<float>(value); return;
    case Storage::f64: break;
  }
  static_cast<double*>(t.data)[o] = static_cast<double>(value);
}

/// Everything a kernel reads: the operands (of `storage`), the weights converted to compact C
/// arrays, the extents and the feature map's constants; the backward's gradients (null data: not
/// wanted).
template <class C>
struct Args {
  Heads q, k, v, grad_out;
  Heads out, dq, dk, dv;
  Storage storage = Storage::f32;
  const C* W = nullptr;        // (m, d)
  const C* key_w = nullptr;    // (B, S) or null
  const C* value_w = nullptr;  // (B, H, S) or null
  int B = 0, H = 0, L = 0, S = 0, d = 0, e = 0, m = 0;
  bool softmax = true, causal = false;
  C x_scale = 1, inv_sqrt_m = 1, alpha_q = 1, beta_q = 0, alpha_k = 1, beta_k = 0;
  const C* key_bound = nullptr;  // causal softmax keys: max_f |W_f|²/2 (one value, on the device)
};

/// Tokens per part (one thread block walks a part's rows in blocks of RB).
struct Parts {
  int count = 1;
  long long length = 0;  // a multiple of the block rows
};

template <class C>
__device__ __forceinline__ C exp_of(C x);
template <>
__device__ __forceinline__ float exp_of(float x) {
  return expf(x);
}
template <>
__device__ __forceinline__ double exp_of(double x) {
  return exp(x);
}

template <class C>
__device__ __forceinline__ C neg_infinity();
template <>
__device__ __forceinline__ float neg_infinity() {
  return -__int_as_float(0x7f800000);
}
template <>
__device__ __forceinline__ double neg_infinity() {
  return -__longlong_as_double(0x7ff0000000000000LL);
}

template <class C>
__device__ __forceinline__ C tiny_of() {
  return sizeof(C) == 4 ? C(1.17549435e-38f) : C(2.2250738585072014e-308);
}

__device__ __forceinline__ int thread_row() { return static_cast<int>(threadIdx.x) / 16; }
__device__ __forceinline__ int thread_col() { return static_cast<int>(threadIdx.x) % 16; }
__device__ __forceinline__ int warp_id() { return static_cast<int>(threadIdx.x) / 32; }
__device__ __forceinline__ int lane_id() { return static_cast<int>(threadIdx.x) % 32; }

template <class C>
__device__ __forceinline__ C warp_sum(C v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
template <class C>
__device__ __forceinline__ C warp_max(C v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const C other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = other > v ? other : v;
  }
  return v;
}

/// The sum of v over the block (every thread gets it); `scratch` holds 8 values.
template <class C>
__device__ C block_sum(C v, C* scratch) {
  v = warp_sum(v);
  __syncthreads();
  if (lane_id() == 0) scratch[warp_id()] = v;
  __syncthreads();
  C total = 0;
#pragma unroll
  for (int w = 0; w < kBlockThreads / 32; ++w) total += scratch[w];
  return total;
}

template <int RR, class C>
__device__ __forceinline__ void zero(C (&acc)[RR][4]) {
#pragma unroll
  for (int r = 0; r < RR; ++r) {
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[r][c] = C(0);
  }
}

/// acc(i, j) += Σ_{p in [kb, ke)} a(i, p)·b(p, j) for this thread's (i, j) of the tile.
template <int RR, class C, class FA, class FB>
__device__ __forceinline__ void product(C (&acc)[RR][4], int kb, int ke, FA a, FB b) {
  const int ty = thread_row(), tx = thread_col();
  for (int p = kb; p < ke; ++p) {
    C av[RR], bv[4];
#pragma unroll
    for (int r = 0; r < RR; ++r) av[r] = a(ty + 16 * r, p);
#pragma unroll
    for (int c = 0; c < 4; ++c) bv[c] = b(p, tx + 16 * c);
#pragma unroll
    for (int r = 0; r < RR; ++r) {
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[r][c] += av[r] * bv[c];
    }
  }
}

/// fn(i, j, value) for this thread's entries of the tile.
template <int RR, class C, class Fn>
__device__ __forceinline__ void for_tile(const C (&acc)[RR][4], Fn fn) {
  const int ty = thread_row(), tx = thread_col();
#pragma unroll
  for (int r = 0; r < RR; ++r) {
#pragma unroll
    for (int c = 0; c < 4; ++c) fn(ty + 16 * r, tx + 16 * c, acc[r][c]);
  }
}

/// dst[i·ld + c] = scale·src(b, h, row0 + i, c) for i < rows, c < cols, and 0 for the rest of
/// the rows_pad × cols_pad block (rows past the valid ones, columns past cols).
template <class C>
__device__ void load_rows(C* dst, int ld, const Heads& src, Storage storage, int b, int h, long long row0, int rows,
                          int rows_pad, int cols, int cols_pad, C scale) {
  for (int idx = static_cast<int>(threadIdx.x); idx < rows_pad * cols_pad; idx += kBlockThreads) {
    const int i = idx / cols_pad, c = idx % cols_pad;
    C value = 0;
    if (i < rows && c < cols) value = load_element<C>(src, storage, b, h, row0 + i, c) * scale;
    dst[i * ld + c] = value;
  }
}

/// out[i] = weights[offset + row0 + i] for i < rows (1 without weights), 0 for padding rows.
template <class C>
__device__ void load_weights(C* out, const C* weights, long long offset, long long row0, int rows, int rows_pad) {
  for (int i = static_cast<int>(threadIdx.x); i < rows_pad; i += kBlockThreads) {
    out[i] = i < rows ? (weights ? weights[offset + row0 + i] : C(1)) : C(0);
  }
}

/// diag[i] = |x'_i|²/2 for the rows of x (ld), one warp per row.
template <class C>
__device__ void half_square_norms(C* diag, const C* x, int ld, int rows, int d) {
  for (int i = warp_id(); i < rows; i += kBlockThreads / 32) {
    C s = 0;
    for (int c = lane_id(); c < d; c += 32) s += x[i * ld + c] * x[i * ld + c];
    s = warp_sum(s);
    if (lane_id() == 0) diag[i] = s / 2;
  }
}

/// The 64 features [f0, f0 + 64) of W (m × d, compact) into stage (64 × d, ld), 0 past m.
template <class C>
__device__ void stage_features(C* stage, int ld, const C* W, int f0, int m, int d) {
  for (int idx = static_cast<int>(threadIdx.x); idx < kTile * d; idx += kBlockThreads) {
    const int f = idx / d, c = idx % d;
    stage[f * ld + c] = f0 + f < m ? W[static_cast<long long>(f0 + f) * d + c] : C(0);
  }
}

/// Rows [f0, f0 + 64) of a compact (m × cols) array into stage (64 × cols, ld), 0 past m.
template <class C>
__device__ void stage_rows(C* stage, int ld, const C* src, int f0, int m, int cols) {
  for (int idx = static_cast<int>(threadIdx.x); idx < kTile * cols; idx += kBlockThreads) {
    const int f = idx / cols, c = idx % cols;
    stage[f * ld + c] = f0 + f < m ? src[static_cast<long long>(f0 + f) * cols + c] : C(0);
  }
}

/// acc[t] = F · S[:, t·kTile, (t + 1)·kTile) for the first et_count value tiles: F (rows × m,
/// leading dimension ldf, in shared memory) times the state S (m × e, row-major), S staged into
/// `stage` (leading dimension lds) kTile rows at a time. Every thread of the block calls it.
template <int RR, class C>
__device__ void features_times_state(C (&acc)[kMaxValueTiles][RR][4], const C* F, int ldf, const C* S, C* stage,
                                     int lds, int m, int e, int et_count) {
#pragma unroll
  for (int t = 0; t < kMaxValueTiles; ++t) zero(acc[t]);
  for (int f0 = 0; f0 < m; f0 += kTile) {
    __syncthreads();
    stage_rows(stage, lds, S, f0, m, e);
    __syncthreads();
    const int kf = min(kTile, m - f0);
#pragma unroll
    for (int t = 0; t < kMaxValueTiles; ++t) {
      if (t < et_count) {
        product(acc[t], 0, kf, [&](int i, int p) { return F[i * ldf + f0 + p]; },
                [&](int p, int c) { return t * kTile + c < e ? stage[p * lds + t * kTile + c] : C(0); });
      }
    }
  }
}

/// dash = x'·Wᵀ for all m features of RB rows: F (RB × m, ldf) from x (RB × d, ldx), W staged 64
/// features at a time through `stage` (64 × d, lds). Padding features (≥ m) are left unwritten.
template <int RR, class C>
__device__ void dash_rows(C* F, int ldf, const C* x, int ldx, const C* W, int m, int d, C* stage, int lds) {
  for (int f0 = 0; f0 < m; f0 += kTile) {
    __syncthreads();
    stage_features(stage, lds, W, f0, m, d);
    __syncthreads();
    C acc[RR][4];
    zero(acc);
    product(acc, 0, d, [&](int i, int p) { return x[i * ldx + p]; }, [&](int p, int j) { return stage[j * lds + p]; });
    for_tile(acc, [&](int i, int j, C value) {
      if (f0 + j < m) F[i * ldf + f0 + j] = value;
    });
  }
  __syncthreads();
}

/// top[i] = max_f F[i][f] over f < m, one warp per row; with `ties`, also the number of f where
/// F equals it (into ties[i]).
template <class C>
__device__ void row_max(C* top, C* ties, const C* F, int ldf, int rows, int m) {
  for (int i = warp_id(); i < rows; i += kBlockThreads / 32) {
    C best = neg_infinity<C>();
    for (int f = lane_id(); f < m; f += 32) best = F[i * ldf + f] > best ? F[i * ldf + f] : best;
    best = warp_max(best);
    if (ties) {
      C count = 0;
      for (int f = lane_id(); f < m; f += 32) count += F[i * ldf + f] == best ? C(1) : C(0);
      count = warp_sum(count);
      if (lane_id() == 0) ties[i] = count;
    }
    if (lane_id() == 0) top[i] = best;
  }
}

/// In place on F (RB × m): softmax g = exp((dash − diag_i) − shift_i) (shift_i = top[i], or c
/// when top is null); relu g = relu(dash·inv_sqrt_m). With `flags` (bytes, RB × m, ld ldf), softmax
/// also marks where dash equals top[i] (the row maxima's entries, for the backward).
template <class C>
__device__ void gate(C* F, int ldf, int rows, int m, bool softmax, const C* diag, const C* top, C c, C inv_sqrt_m,
                     unsigned char* flags) {
  for (int idx = static_cast<int>(threadIdx.x); idx < rows * m; idx += kBlockThreads) {
    const int i = idx / m, f = idx % m;
    const C dash = F[i * ldf + f];
    if (softmax) {
      const C shift = top ? top[i] : c;
      if (flags) flags[i * ldf + f] = dash == shift ? 1 : 0;
      F[i * ldf + f] = exp_of((dash - diag[i]) - shift);
    } else {
      const C u = dash * inv_sqrt_m;
      F[i * ldf + f] = u > C(0) ? u : C(0);
    }
  }
}

/// In place: F = w_i·α·(F + β) over rows × m (w null: 1).
template <class C>
__device__ void affine(C* F, int ldf, int rows, int m, C alpha, C beta, const C* w) {
  for (int idx = static_cast<int>(threadIdx.x); idx < rows * m; idx += kBlockThreads) {
    const int i = idx / m, f = idx % m;
    F[i * ldf + f] = (w ? w[i] : C(1)) * ((F[i * ldf + f] + beta) * alpha);
  }
}

/// out[i] = Σ_f F[i][f]·vec[f] (f < m), one warp per row.
template <class C>
__device__ void row_dots(C* out, const C* F, int ldf, int rows, int m, const C* vec) {
  for (int i = warp_id(); i < rows; i += kBlockThreads / 32) {
    C s = 0;
    for (int f = lane_id(); f < m; f += 32) s += F[i * ldf + f] * vec[f];
    s = warp_sum(s);
    if (lane_id() == 0) out[i] = s;
  }
}

/// dz_i = −(dout_i·out_i)/z_i and dn = dout/z (in place on `go`), both 0 where z_i < tiny (see
/// cpu/performer_backward_cpu.cpp); out_rows (rows × e, ld) is the forward's output.
template <class C>
__device__ void output_gradients(C* go, const C* out_rows, int ld, C* dz, const C* z, int rows, int e) {
  for (int i = warp_id(); i < rows; i += kBlockThreads / 32) {
    C s = 0;
    for (int c = lane_id(); c < e; c += 32) s += go[i * ld + c] * out_rows[i * ld + c];
    s = warp_sum(s);
    const bool kept = z[i] >= tiny_of<C>();
    for (int c = lane_id(); c < e; c += 32) go[i * ld + c] = kept ? go[i * ld + c] / z[i] : C(0);
    if (lane_id() == 0) dz[i] = kept ? -s / z[i] : C(0);
  }
}

}  // namespace sketchcore::cuda::performer
