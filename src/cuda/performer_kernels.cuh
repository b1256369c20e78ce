// The CUDA Performer kernels' launchers (defined beside the kernels in performer_forward.cu and
// performer_backward.cu) and the shared memory each needs, for the host side (performer_cuda.cu).
// RR selects the rows per block of the row kernels: RB = 16·RR tokens (4: 64, 2: 32, 1: 16).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>

#include "performer_device.cuh"

namespace sketchcore::cuda::performer {

/// Allows `smem` bytes of dynamic shared memory for `kernel` (beyond the default 48 KiB).
template <class Kernel>
void allow_smem(Kernel kernel, std::size_t smem) {
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
        "cudaFuncSetAttribute (Performer kernel shared memory)");
}

/// Floats (C elements) of the partial key sums of one (head, part): A (m × e), Aden (m), the
/// per-feature maxima (m), B (e), Bden (1).
inline long long partial_elements(int m, int e) { return static_cast<long long>(m) * e + 2LL * m + e + 1; }


// Shared memory of each kernel, in elements of C (the layouts in the kernels).
inline std::size_t state_parts_smem(int d, int e) {
  return std::size_t(kTile) * (d + 1) * 2 + std::size_t(kTile) * (kTile + 1) + std::size_t(kTile) * (padded(e) + 1) +
         6 * kTile + padded(e) + 1;
}
inline std::size_t query_output_smem(int rb, int d, int e, int m) {
  return std::size_t(rb) * (d + 1) + std::size_t(rb) * (m + 1) + std::size_t(kTile) * (std::max(d, padded(e)) + 1) +
         3 * rb;
}
inline std::size_t causal_forward_smem(int rb, int d, int e, int m) {
  return std::size_t(rb) * (d + 1) + 2 * std::size_t(rb) * (m + 1) + std::size_t(rb) * (padded(e) + 1) +
         std::size_t(rb) * (kTile + 1) + std::size_t(kTile) * (std::max(d, padded(e)) + 1) + 5 * rb;
}
inline std::size_t query_grad_smem(int rb, int d, int e, int m) {
  return std::size_t(rb) * (d + 1) + 2 * std::size_t(rb) * (m + 1) + 2 * std::size_t(rb) * (padded(e) + 1) +
         std::size_t(kTile) * (std::max(d, padded(e)) + 1) + 6 * rb + kBlockThreads / 32;
}
inline std::size_t key_grad_smem(int rb, int d, int e) {
  return std::size_t(rb) * (d + 1) + std::size_t(rb) * (padded(e) + 1) + std::size_t(kTile) * (d + 1) +
         std::size_t(kTile) * (padded(e) + 1) + 2 * std::size_t(rb) * (kTile + 1) + 5 * rb + kBlockThreads / 32;
}
inline std::size_t causal_grad_smem(int rb, int d, int e, int m) {
  return std::size_t(rb) * (d + 1) + 3 * std::size_t(rb) * (m + 1) + 3 * std::size_t(rb) * (padded(e) + 1) +
         2 * std::size_t(rb) * (kTile + 1) + std::size_t(kTile) * (std::max(d, padded(e)) + 1) + 8 * rb;
}
/// Flags bytes of the query maxima's entries (query_grad and causal_grad kernels), after the elements.
inline std::size_t flag_bytes(int rb, int m) { return std::size_t(rb) * (m + 1); }

// --- forward (performer_forward.cu) ----------------------------------------------------------

/// bound[0] = max_f |W_f|²/2 for W (m × d, compact).
template <class C>
void launch_key_bound(const C* W, int m, int d, C* bound, cudaStream_t stream);

template <class C>
void launch_state_parts(const Args<C>& args, Parts parts, C* partial, std::size_t smem, cudaStream_t stream);
template <class C>
void launch_key_constant(const C* partial, int heads, int part_count, int m, int e, C* constant, cudaStream_t stream);
template <class C>
void launch_merge(const C* partial, int heads, int part_count, int m, int e, bool softmax, bool causal, C alpha,
                  C beta, const C* constant, C* state, cudaStream_t stream);
template <class C>
void launch_query_output(const Args<C>& args, const C* state, int rr, std::size_t smem, cudaStream_t stream);
template <class C>
void launch_causal_forward(const Args<C>& args, Parts parts, const C* state_before, C* running, int rr,
                           std::size_t smem, cudaStream_t stream);

// --- backward (performer_backward.cu) --------------------------------------------------------

/// Per (head, query part): dS (m × e) and dS_den (m), summed by launch_sum_parts.
template <class C>
void launch_query_grad(const Args<C>& args, Parts parts, const C* state, C* ds_partial, int rr, std::size_t smem,
                       cudaStream_t stream);
/// out[head] = Σ_parts partial[head, part] (`size` elements each), in part order.
template <class C>
void launch_sum_parts(const C* partial, int heads, int part_count, long long size, C* out, cudaStream_t stream);
/// Per (head, key part): dk, dv; the keys' constant's gradient into dc[head, part] and its tied
/// entries (key·m + feature) into ties[head, 0 .. capacity), counted in tie_count[head].
template <class C>
void launch_key_grad(const Args<C>& args, Parts parts, const C* ds, const C* constant, C* dc, long long* ties,
                     int* tie_count, int capacity, int rr, std::size_t smem, cudaStream_t stream);
/// dk_j += x_scale·(Σ dc / count)·W_f for the tied entries (j, f) of each head's constant.
template <class C>
void launch_tie_fixup(const Args<C>& args, int part_count, const C* constant, const C* dc, const long long* ties,
                      const int* tie_count, int capacity, cudaStream_t stream);
/// Causal, forward direction: dq, and dn (L × e) and dz (L) per head into `saved`.
template <class C>
void launch_causal_grad_q(const Args<C>& args, Parts parts, const C* state_before, C* running, C* saved, int rr,
                          std::size_t smem, cudaStream_t stream);
/// Causal: per part R = Σ_i φ(q_i) ⊗ dn_i and R_den = Σ_i dz_i·φ(q_i) (into partial, m·e + m each).
template <class C>
void launch_causal_r_parts(const Args<C>& args, Parts parts, const C* saved, C* partial, int rr, std::size_t smem,
                           cudaStream_t stream);
/// Causal: per part the sums over the parts after it (suffix), into after.
template <class C>
void launch_suffix(const C* partial, int heads, int part_count, long long size, C* after, cudaStream_t stream);
/// Causal, reverse direction: dk and dv.
template <class C>
void launch_causal_grad_kv(const Args<C>& args, Parts parts, const C* r_after, C* running, const C* saved, int rr,
                           std::size_t smem, cudaStream_t stream);

}  // namespace sketchcore::cuda::performer
