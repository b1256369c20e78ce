"""Near-optimal factors for converting a trained dense weight: truncated SVDs (exact, or
randomized through sketchcore.linalg.rsvd when the rank is small next to the layer), the
smallest rank meeting an error tolerance, and the SVD-chosen factors of Panther's layer.

Conventions: a dense layer computes ``y = x Wᵀ + b`` with W (out, in) as ``nn.Linear``; its
transpose M = Wᵀ (in × out) is what the sketched layers factor (``y = x A B + b``).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from sketchcore import _ranks, linalg

#: Below this fraction of min(in, out), a randomized SVD replaces the exact one.
_RANDOMIZED_BELOW = 0.25


def truncated_svd(M: Tensor, rank: int) -> tuple[Tensor, Tensor, Tensor]:
    """U (in × rank), s (rank,), Vt (rank × out) of M (in × out), computed in float64:
    exactly, or by a randomized SVD (3 power iterations) when ``rank`` is small."""
    M64 = M.detach().to(torch.float64)
    if rank < _RANDOMIZED_BELOW * min(M64.shape):
        return linalg.rsvd(M64, rank, oversample=10, power_iters=3, seed=0x5C)
    U, s, Vt = torch.linalg.svd(M64, full_matrices=False)
    return U[:, :rank], s[:rank], Vt[:rank]


def rank_for_tolerance(M: Tensor, tolerance: float) -> tuple[int, float]:
    """The smallest rank r whose truncated SVD has relative Frobenius error ≤ ``tolerance``
    (from M's exact singular values), and that error."""
    s = torch.linalg.svdvals(M.detach().to(torch.float64))
    return _ranks.rank_for_tolerance((s * s).tolist(), tolerance)


def balanced_factors(M: Tensor, rank: int) -> tuple[Tensor, Tensor]:
    """A (in × rank), B (rank × out) with A B the best rank-``rank`` approximation of M, the
    singular values split evenly (A = U √s, B = √s Vt) so both factors train alike."""
    U, s, Vt = truncated_svd(M, rank)
    root = torch.sqrt(s)
    return U * root, root[:, None] * Vt


def sklinear_factors(M: Tensor, terms: int, rank: int, generator: torch.Generator | None = None
                     ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """S1s (T, in, k), S2s (T, k, out), U1s (T, k, out), U2s (T, in, k) such that Panther's layer
    1/(2T) Σ_t [S1_t U1_t + U2_t S2_t] is the best rank-2Tk approximation of M: the layer
    along M's leading right singular vectors (see :func:`sklinear_factors_along`)."""
    n_in, n_out = M.shape
    _, _, Vt = truncated_svd(M, min(n_in, n_out, 2 * terms * rank))
    return sklinear_factors_along(M, Vt, terms, rank, generator)


def sklinear_factors_along(M: Tensor, Vt: Tensor, terms: int, rank: int, generator: torch.Generator | None = None
                           ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Panther's factors of the layer M Ṽ Ṽᵀ, Ṽ the first 2Tk of the orthonormal output
    directions ``Vt`` (rows, most important first): M's right singular vectors give the best
    rank-2Tk approximation of M, the whitened ones (``_whitened``) the best for calibration
    outputs.

    The 2T blocks of k directions Ṽ_b go to the terms in turn: block 2t fixes U1_t = Ṽ_bᵀ and
    learns S1_t = 2T·M Ṽ_b; block 2t+1 fixes U2_t = Q and learns S2_t = 2T·R Ṽ_bᵀ, from the QR
    factorisation M Ṽ_b = Q R (for singular vectors, Q holds the left ones up to sign).
    Directions beyond min(in, out) do not exist: their fixed rows/columns are random signs ±1/√k
    and their learnable factors start at 0."""
    n_in, n_out = M.shape
    M64, Vt = M.detach().to("cpu", torch.float64), Vt.to("cpu", torch.float64)  # assembled on the host
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


def skconv_factors(M: Tensor, blocks: int, rank: int, generator: torch.Generator | None = None
                   ) -> tuple[Tensor, Tensor]:
    """S (L, in, k) and U1s (L, k, out), L = ``blocks``, such that 1/L Σ_l S_l U1s_l is the best
    rank-L·k approximation of M (in × out): block l of k singular triplets, largest first,
    fixes U1s_l = its vᵀ rows and learns S_l = L·U·diag(s). Directions beyond min(in, out) do
    not exist: their fixed rows are random signs ±1/√k and their learnable columns start at 0."""
    n_in, n_out = M.shape
    available = min(n_in, n_out, blocks * rank)
    U, s, Vt = truncated_svd(M, available)
    S = torch.zeros(blocks, n_in, rank, dtype=torch.float64)
    U1s = (torch.randint(0, 2, (blocks, rank, n_out), generator=generator) * 2 - 1).to(torch.float64) / math.sqrt(rank)
    for block in range(blocks):
        lo, hi = block * rank, min((block + 1) * rank, available)
        if lo < hi:
            U1s[block, :hi - lo] = Vt[lo:hi]
            S[block, :, :hi - lo] = blocks * U[:, lo:hi] * s[lo:hi]
    return S, U1s


def relative_error(approximation: Tensor, M: Tensor) -> float:
    """‖approximation − M‖_F / ‖M‖_F in float64 (0 for a zero M approximated exactly)."""
    a, m = approximation.detach().to(torch.float64), M.detach().to(torch.float64)
    norm = float(torch.linalg.norm(m))
    difference = float(torch.linalg.norm(a - m))
    return difference / norm if norm > 0 else difference
