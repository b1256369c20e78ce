"""``rsvd`` and ``rangefinder``: the randomized SVD of Halko, Martinsson and Tropp (SIAM Review 2011): a sketch
``Y = A Ω`` captures the range of ``A`` (``Ω`` of ``rank + oversample`` columns, any sketch
kind: Gaussian, Rademacher, sparse sign, SRHT, ...), a few power iterations sharpen it, and a
small dense SVD of ``Qᵀ A`` finishes. The QR and the small SVD run in the caller's framework
(NumPy/LAPACK, torch on CPU or CUDA, or an array-API namespace), so NumPy in gives NumPy out
and torch in gives torch out, on the same device.
"""
from __future__ import annotations

from typing import TypeVar

from sketchcore.linalg._backend import Ops as _Ops, SketchKind, check_int as _check_int, sized as _sized
from sketchcore.linalg._backend import sketch_operator as _sketch_operator

__all__ = ["rangefinder", "rsvd"]

ArrayT = TypeVar("ArrayT")


def rangefinder(A: ArrayT, size: int, *, power_iters: int = 2, sketch: SketchKind = "gaussian",
                seed: int | None = None) -> ArrayT:
    """An orthonormal basis Q (m × size) whose span captures the dominant column space of A.

    For A (m × n): Q = orth(A Ω) after ``power_iters`` re-orthonormalized power iterations
    ``Q ← orth(A orth(Aᵀ Q))``. ``size`` ≤ min(m, n).

    Parameters
    ----------
    A : array (m × n)
        NumPy array, torch tensor or array-API array.
    size : int
        Number of basis vectors, in [1, min(m, n)].
    power_iters : int, default 2
        Power iterations ≥ 0.
    sketch : str, default "gaussian"
        Kind of sketch operator Ω.
    seed : int, optional
        Seed of Ω; the same seed gives the same basis.

    Returns
    -------
    Q : array (m × size)
        Orthonormal columns, in A's framework, dtype and device.

    Raises
    ------
    ValueError
        ``"rsvd: A: expected a 2-D array, got shape ..."``, ``"rsvd: size: expected an integer ≥ 1,
        got ..."``, ``"rsvd: size: expected at most min(m, n) = ..., got ..."``, ``"rsvd:
        power_iters: expected an integer ≥ 0, got ..."``, or an unknown sketch kind (``"rsvd:
        sketch: expected one of [...], got ..."``).
    TypeError
        A non-integer size/power_iters (``"rsvd: size: expected an int, got float"``) or an array
        of an unsupported framework.

    Examples
    --------
    >>> import numpy as np
    >>> from sketchcore.linalg import rangefinder
    >>> rng = np.random.default_rng(0)
    >>> A = rng.standard_normal((80, 4)) @ rng.standard_normal((4, 50))  # rank 4
    >>> Q = rangefinder(A, 4, seed=0)
    >>> Q.shape, bool(np.allclose(Q.T @ Q, np.eye(4)))
    ((80, 4), True)
    >>> bool(np.allclose(Q @ (Q.T @ A), A))  # the span holds A's columns
    True
    """
    m, n, size = _sized(A, size, "size")
    power_iters = _check_int(power_iters, "power_iters", 0)
    ops = _Ops(A)
    omega = _sketch_operator(sketch, size, n, seed, "rsvd").T  # n × size, applied without being formed
    Q = ops.qr(A @ omega)
    At = ops.T(A)
    for _ in range(power_iters):
        Q = ops.qr(At @ Q)
        Q = ops.qr(A @ Q)
    return Q  # type: ignore[no-any-return]


def rsvd(A: ArrayT, rank: int, *, oversample: int = 10, power_iters: int = 2, sketch: SketchKind = "gaussian",
         seed: int | None = None) -> tuple[ArrayT, ArrayT, ArrayT]:
    """Randomized truncated SVD: ``U (m × rank), s (rank,), Vt (rank × n)`` with ``A ≈ U diag(s) Vt``.

    s is descending. With ``power_iters`` = 2 and ``oversample`` = 10 the error is within a few
    percent of the optimal rank-``rank`` error (Eckart–Young) for the spectra of trained layers;
    more power iterations help flat spectra. The sketch is a sketchcore operator (``sketch`` kind,
    ``seed``): the same seed gives the same factors.

    Parameters
    ----------
    A : array (m × n)
        NumPy array, torch tensor (CPU or CUDA) or array-API array.
    rank : int
        Target rank, in [1, min(m, n)].
    oversample : int, default 10
        Extra sketch columns ≥ 0 (the sketch has min(rank + oversample, m, n) columns).
    power_iters : int, default 2
        Power iterations ≥ 0.
    sketch : str, default "gaussian"
        Kind of sketch operator (Gaussian, Rademacher, sparse sign, SRHT, ...).
    seed : int, optional
        Seed of the sketch; the same seed gives the same factors.

    Returns
    -------
    U : array (m × rank)
        Orthonormal left singular vectors.
    s : array (rank,)
        Singular values, descending.
    Vt : array (rank × n)
        Orthonormal right singular vectors, as rows.

    Raises
    ------
    ValueError
        For a non-2-D ``A`` (``"rsvd: A: expected a 2-D array, got shape ..."``), ``rank`` ≤ 0
        (``"rsvd: rank: expected an integer ≥ 1, got ..."``) or > min(m, n) (``"rsvd: rank:
        expected at most min(m, n) = ..., got ..."``), a negative ``oversample`` or
        ``power_iters`` (``"rsvd: oversample: expected an integer ≥ 0, got ..."``), or an unknown
        sketch kind.
    TypeError
        For non-integers (``"rsvd: rank: expected an int, got float"``) or arrays of an
        unsupported framework.

    Examples
    --------
    >>> import numpy as np
    >>> from sketchcore.linalg import rsvd
    >>> rng = np.random.default_rng(0)
    >>> A = rng.standard_normal((100, 6)) @ rng.standard_normal((6, 40))  # rank 6
    >>> U, s, Vt = rsvd(A, 6, seed=0)
    >>> U.shape, s.shape, Vt.shape
    ((100, 6), (6,), (6, 40))
    >>> bool(np.allclose((U * s) @ Vt, A)), bool(np.allclose(s, np.linalg.svd(A, compute_uv=False)[:6]))
    (True, True)
    """
    m, n, rank = _sized(A, rank, "rank")
    oversample = _check_int(oversample, "oversample", 0)
    ops = _Ops(A)
    Q = rangefinder(A, min(rank + oversample, m, n), power_iters=power_iters, sketch=sketch, seed=seed)
    B = ops.T(Q) @ A  # (rank + oversample) × n
    Ub, s, Vt = ops.svd(B)
    return (Q @ Ub)[:, :rank], s[:rank], Vt[:rank]
