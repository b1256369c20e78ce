"""Data-aware factors: the rank-r layer whose *outputs* on calibration activations X are
closest to the dense layer's, from the activations' Gram matrix G = XᵀX alone.

For a layer y = x M (M in × out) the output error of a replacement N is
‖X(M − N)‖_F² = tr((M − N)ᵀ G (M − N)). With G = Q Λ Qᵀ (eigendecomposition in float64,
eigenvalues below zero from rounding clamped to zero) and the whitening factor
L = Q Λ^½ (G = L Lᵀ), that is ‖Lᵀ(M − N)‖_F², so the best rank-r N truncates the whitened
weight Z = Lᵀ M = Ũ s̃ Ṽᵀ (Eckart–Young) and unwhitens it:
N = L⁻ᵀ Ũ_r s̃_r Ṽ_rᵀ = L⁻ᵀ Lᵀ M Ṽ_r Ṽ_rᵀ = M Ṽ_r Ṽ_rᵀ.
The last form needs no inverse of L: it is exact, and stable, when the activations are
rank-deficient (then L is singular and any N agreeing on range(X) is optimal; this one keeps
M's own values off that range, projected on the kept output directions). s̃ are the singular
values of X M, so the relative output error of rank r is √(Σ_{i>r} s̃_i² / Σ s̃_i²).
This is the whitened truncation of SVD-LLM (Wang et al., 2024), on the output side.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor


def whitened_svd(M: Tensor, gram: Tensor) -> tuple[Tensor, Tensor]:
    """s̃ (min(in, out),) and Ṽᵀ (min(in, out) × out): the singular values and output-side
    singular vectors of Lᵀ M, largest first, in float64."""
    G = gram.to(torch.float64)
    G = (G + G.t()) / 2  # exact symmetry for eigh
    eigenvalues, Q = torch.linalg.eigh(G)
    root = torch.sqrt(torch.clamp(eigenvalues, min=0.0))
    Z = root[:, None] * (Q.t() @ M.detach().to(torch.float64))  # Lᵀ M = Λ^½ Qᵀ M
    _, s, Vt = torch.linalg.svd(Z, full_matrices=False)
    return s, Vt


def rank_for_output_tolerance(s: Tensor, tolerance: float) -> tuple[int, float]:
    """The smallest rank r ≥ 1 whose relative output error √(Σ_{i>r} s̃_i² / Σ s̃_i²) is at
    most ``tolerance``, and that error (rank 1, error 0 when the layer's outputs are all zero)."""
    energy = s * s
    total = float(energy.sum())
    if total == 0.0:
        return 1, 0.0
    tail = torch.flip(torch.cumsum(torch.flip(energy, [0]), 0), [0])  # tail[r] = Σ_{i ≥ r} s̃_i²
    errors = torch.sqrt(torch.clamp(torch.cat([tail[1:], tail.new_zeros(1)]), min=0.0) / total)
    for r, error in enumerate(errors.tolist(), start=1):
        if error <= tolerance:
            return r, error
    return len(s), 0.0


def lowrank_factors(M: Tensor, Vt: Tensor, rank: int) -> tuple[Tensor, Tensor]:
    """A (in × rank), B (rank × out) with A B = M Ṽ_r Ṽ_rᵀ, the columns scaled so that
    ‖A_j‖ = ‖B_j‖ (both factors train alike, as the weight-SVD conversion's U√s, √s Vᵀ)."""
    V = Vt[:rank].t()  # out × rank, orthonormal columns
    A = M.detach().to(torch.float64) @ V
    scale = torch.sqrt(torch.linalg.vector_norm(A, dim=0))
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return A / scale, scale[:, None] * V.t()


def sklinear_factors(M: Tensor, Vt: Tensor, terms: int, rank: int, generator: Optional[torch.Generator] = None
                     ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """S1s (T, in, k), S2s (T, k, out), U1s (T, k, out), U2s (T, in, k) such that Panther's layer
    1/(2T) Σ_t [S1_t U1_t + U2_t S2_t] equals M Ṽ_{2Tk} Ṽ_{2Tk}ᵀ, the best rank-2Tk layer for
    the calibration outputs.

    The 2T blocks of k output directions Ṽ_b, largest first, go to the terms in turn: block 2t
    fixes U1_t = Ṽ_bᵀ and learns S1_t = 2T·M Ṽ_b; block 2t+1 fixes U2_t = Q and learns
    S2_t = 2T·R Ṽ_bᵀ, from the QR factorisation M Ṽ_b = Q R (Q orthonormal input directions,
    as the left singular vectors of the weight-SVD initialisation). Directions beyond
    min(in, out) do not exist: their fixed rows/columns are random signs ±1/√k and their
    learnable factors start at 0, as in the weight-SVD initialisation."""
    n_in, n_out = M.shape
    M64, Vt = M.detach().to("cpu", torch.float64), Vt.to("cpu", torch.float64)  # assembled on the host, as _factors
    available = min(n_in, n_out, 2 * terms * rank, Vt.shape[0])
    scale = 2 * terms
    sign = 1.0 / math.sqrt(rank)

    def signs(*shape: int) -> Tensor:
        return (torch.randint(0, 2, shape, generator=generator) * 2 - 1).to(torch.float64) * sign

    S1s, S2s = torch.zeros(terms, n_in, rank, dtype=torch.float64), torch.zeros(terms, rank, n_out, dtype=torch.float64)
    U1s, U2s = signs(terms, rank, n_out), signs(terms, n_in, rank)
    for t in range(terms):
        for block, first in ((2 * t, True), (2 * t + 1, False)):
            lo, hi = block * rank, min((block + 1) * rank, available)
            if lo >= hi:
                continue
            width = hi - lo
            V = Vt[lo:hi].t()  # out × width
            projected = M64 @ V  # in × width
            if first:
                U1s[t, :width] = V.t()
                S1s[t, :, :width] = scale * projected
            else:
                Q, R = torch.linalg.qr(projected)
                U2s[t, :, :width] = Q
                S2s[t, :width] = scale * (R @ V.t())
    return S1s, S2s, U1s, U2s


def output_error(N: Tensor, M: Tensor, gram: Tensor) -> float:
    """‖X(N − M)‖_F / ‖X M‖_F from G = XᵀX, in float64 (the absolute error when X M = 0)."""
    G = gram.to(torch.float64)
    M64 = M.detach().to(torch.float64)
    D = N.detach().to(torch.float64) - M64
    error = float(torch.clamp((D * (G @ D)).sum(), min=0.0))
    total = float(torch.clamp((M64 * (G @ M64)).sum(), min=0.0))
    return math.sqrt(error / total) if total > 0 else math.sqrt(error)
