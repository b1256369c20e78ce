"""Data-aware factors: the rank-r layer whose *outputs* on calibration activations X are
closest to the dense layer's, from the activations' Gram matrix G = XᵀX alone.

For a layer y = x M (M in × out) the output error of a replacement N is
‖X(M − N)‖_F² = tr((M − N)ᵀ G (M − N)). With any whitening factor L, G = L Lᵀ — the Cholesky
factor in float64 (a ninth of an eigendecomposition's work), or, when Cholesky fails on a
semidefinite G, L = Q Λ^½ from G = Q Λ Qᵀ (eigenvalues below zero from rounding clamped to
zero); both are backward stable, L Lᵀ = G + E with ‖E‖ ≈ ε‖G‖ — that is ‖Lᵀ(M − N)‖_F², so
the best rank-r N truncates the whitened weight Z = Lᵀ M = Ũ s̃ Ṽᵀ (Eckart–Young) and
unwhitens it:
N = L⁻ᵀ Ũ_r s̃_r Ṽ_rᵀ = L⁻ᵀ Lᵀ M Ṽ_r Ṽ_rᵀ = M Ṽ_r Ṽ_rᵀ.
The last form needs no inverse of L: it is exact, and stable, when the activations are
rank-deficient (then L is singular and any N agreeing on range(X) is optimal; this one keeps
M's own values off that range, projected on the kept output directions). s̃ are the singular
values of X M, so the relative output error of rank r is √(Σ_{i>r} s̃_i² / Σ s̃_i²).
This is the whitened truncation of SVD-LLM (Wang et al., 2024), on the output side.

L depends on the inputs only, so it is computed once per Gram tensor (cached by identity while
the tensor lives and is unchanged): layers fed the same input (q, k, v; gate, up), which
calibration gives one shared Gram tensor, and repeated conversions from one ``Calibration``
factor it once. LAPACK runs single-threaded on matrices up to ``SERIAL_LAPACK`` wide: at these
sizes a second thread gains little on a quiet machine and loses much more on a busy one.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch
from torch import Tensor
from torch.utils.weak import WeakIdKeyDictionary

from sketchcore import _ranks
from sketchcore.torch.layers import _factors


#: Up to this width LAPACK (factorisations, SVDs) runs on one thread. Measured on 2 shared cores: a
#: 384-wide SVD took 0.07 s on one thread and 0.3–8.7 s on two; a 1536-wide eigh 2.3 s and 15.8 s.
SERIAL_LAPACK = 2048

_WHITENING: WeakIdKeyDictionary = WeakIdKeyDictionary()  # Gram tensor → (its version, Lᵀ)


@contextlib.contextmanager
def lapack_threads(width: int) -> Iterator[None]:
    """One torch thread for the block when ``width`` ≤ ``SERIAL_LAPACK``, else torch's setting."""
    threads = torch.get_num_threads()
    serial = width <= SERIAL_LAPACK and threads > 1
    if serial:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if serial:
            torch.set_num_threads(threads)


def whitening(gram: Tensor) -> Tensor:
    """Lᵀ (in × in, float64) with L Lᵀ = G: computed once per Gram tensor while it is unchanged."""
    cached = _WHITENING.get(gram)
    if cached is not None and cached[0] == gram._version:
        return cached[1]
    Lt = factorise(gram)
    _WHITENING[gram] = (gram._version, Lt)
    return Lt


def factorise(gram: Tensor) -> Tensor:
    """Lᵀ with L Lᵀ = G (float64): Cholesky's upper factor, or Λ^½ Qᵀ when G is singular."""
    G = gram.detach().to(torch.float64)
    G = (G + G.t()) / 2  # exact symmetry
    with lapack_threads(G.shape[0]):
        L, info = torch.linalg.cholesky_ex(G)
        if int(info) == 0:
            return L.t()
        eigenvalues, Q = torch.linalg.eigh(G)
    root = torch.sqrt(torch.clamp(eigenvalues, min=0.0))
    return root[:, None] * Q.t()


def whitened_svd(M: Tensor, gram: Tensor) -> tuple[Tensor, Tensor]:
    """s̃ (min(in, out),) and Ṽᵀ (min(in, out) × out): the singular values and output-side
    singular vectors of Lᵀ M, largest first, in float64."""
    Lt = whitening(gram)
    with lapack_threads(max(M.shape)):
        _, s, Vt = torch.linalg.svd(Lt @ M.detach().to(torch.float64), full_matrices=False)
    return s, Vt


def rank_for_output_tolerance(s: Tensor, tolerance: float) -> tuple[int, float]:
    """The smallest rank r ≥ 1 whose relative output error √(Σ_{i>r} s̃_i² / Σ s̃_i²) is at
    most ``tolerance``, and that error (rank 1, error 0 when the layer's outputs are all zero)."""
    return _ranks.rank_for_tolerance((s * s).tolist(), tolerance)


def lowrank_factors(M: Tensor, Vt: Tensor, rank: int) -> tuple[Tensor, Tensor]:
    """A (in × rank), B (rank × out) with A B = M Ṽ_r Ṽ_rᵀ, the columns scaled so that
    ‖A_j‖ = ‖B_j‖ (both factors train alike, as the weight-SVD conversion's U√s, √s Vᵀ)."""
    V = Vt[:rank].t()  # out × rank, orthonormal columns
    A = M.detach().to(torch.float64) @ V
    scale = torch.sqrt(torch.linalg.vector_norm(A, dim=0))
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return A / scale, scale[:, None] * V.t()


#: Panther's factors along the whitened output directions (the shared construction).
sklinear_factors = _factors.sklinear_factors_along


def output_error(N: Tensor, M: Tensor, gram: Tensor) -> float:
    """‖X(N − M)‖_F / ‖X M‖_F from G = XᵀX, in float64 (the absolute error when X M = 0)."""
    G = gram.to(torch.float64)
    M64 = M.detach().to(torch.float64)
    D = N.detach().to(torch.float64) - M64
    error = float(torch.clamp((D * (G @ D)).sum(), min=0.0))
    total = float(torch.clamp((M64 * (G @ M64)).sum(), min=0.0))
    return math.sqrt(error / total) if total > 0 else math.sqrt(error)
