"""``randomized_svd(A, k, tol)``: Panther's call shape and return convention (V, not Vᵀ), as a
blocked randomized QB factorization with an error-based stop (Martinsson and Voronin, "A randomized
blocked algorithm for efficiently computing rank-revealing factorizations of matrices", SISC 2016)
on sketchcore's sketch operators.

Blocks of ``block_size`` columns are sketched from the part of A not yet captured, Y = (I − Q Qᵀ) A Ω,
sharpened by ``power_iters`` power iterations and appended to Q; B = Qᵀ A grows with them. Because
‖A − Q B‖²_F = ‖A‖²_F − ‖B‖²_F exactly (Q orthonormal), the error is known after every block
without touching A again, and the loop stops as soon as it is ≤ ``tol``·‖A‖_F. A is never copied
or updated (the projection is applied to the thin sketches). The width covers k + ``oversample``
columns so that the rank-k truncation of the final small SVD is within a few percent of optimal.
"""
from __future__ import annotations

from typing import TypeVar

from sketchcore.linalg._backend import Ops, SketchKind, check_float, check_int, sized, sketch_operator

__all__ = ["randomized_svd"]

ArrayT = TypeVar("ArrayT")

_WHERE = "randomized_svd"


def randomized_svd(A: ArrayT, k: int, tol: float = 1e-6, *, oversample: int = 10, power_iters: int = 2,
                   block_size: int = 64, sketch: SketchKind = "gaussian",
                   seed: int | None = None) -> tuple[ArrayT, ArrayT, ArrayT]:
    """Truncated randomized SVD with Panther's signature: ``U, S, V`` with ``A ≈ U @ diag(S) @ V.T``.

    Note: V (n × r), not Vᵀ; S descending, r ≤ ``k``.
    r is ``k``, or the smallest rank whose estimated relative error ‖A − U diag(S) Vᵀ‖_F / ‖A‖_F is
    ≤ ``tol`` when that is smaller (``tol=0`` always returns k). Works on NumPy arrays, torch
    tensors (CPU or CUDA) and CuPy arrays; results are of A's framework, dtype and device. With the
    defaults the rank-k error is within a few percent of the optimal (Eckart–Young) error on
    decaying spectra. ``sketch``/``seed`` choose the sketch operators (same seed, same result).

    Parameters
    ----------
    A : array (m × n)
        NumPy array, torch tensor or CuPy array (float32 or float64).
    k : int
        Largest rank returned, in [1, min(m, n)].
    tol : float, default 1e-6
        Relative Frobenius error ≥ 0 at which to stop early; 0 always returns rank k.
    oversample : int, default 10
        Extra sketch columns ≥ 0 beyond k.
    power_iters : int, default 2
        Power iterations ≥ 0 per block (more help flat spectra).
    block_size : int, default 64
        Columns ≥ 1 sketched per block; the error is checked after each block.
    sketch : str, default "gaussian"
        Kind of sketch operator.
    seed : int, optional
        Seed ≥ 0 of the sketch operators (block b uses ``seed + b·block_size``).

    Returns
    -------
    U : array (m × r)
        Orthonormal left singular vectors.
    S : array (r,)
        Singular values, descending.
    V : array (n × r)
        Orthonormal right singular vectors (V, not Vᵀ).

    Raises
    ------
    ValueError
        ``"randomized_svd: A: expected a 2-D array, got shape ..."``, ``"randomized_svd: k: expected
        an integer ≥ 1, ..."`` or ``"... expected at most min(m, n) = ..., got ..."``, a negative or
        non-finite tol (``"randomized_svd: tol: expected a finite number ≥ 0.0, ..."``), negative
        oversample/power_iters or block_size < 1 (``"randomized_svd: <name>: expected an integer ≥
        <low>, got ..."``), or an unknown sketch kind.
    TypeError
        Non-integer sizes (``"randomized_svd: k: expected an int, got float"``) or an unsupported
        array type.

    Examples
    --------
    >>> import numpy as np
    >>> from sketchcore.linalg import randomized_svd
    >>> rng = np.random.default_rng(0)
    >>> A = rng.standard_normal((100, 5)) @ rng.standard_normal((5, 60))  # rank 5
    >>> U, S, V = randomized_svd(A, 5, tol=0, seed=0)
    >>> U.shape, S.shape, V.shape
    ((100, 5), (5,), (60, 5))
    >>> bool(np.allclose(U @ np.diag(S) @ V.T, A)), bool(np.all(np.diff(S) <= 0))
    (True, True)
    >>> U, S, V = randomized_svd(A, 20, tol=1e-6, seed=0)  # stops once the error is ≤ tol
    >>> S.shape
    (5,)
    """
    m, n, k = sized(A, k, "k", _WHERE)
    tol = check_float(tol, "tol", 0.0, _WHERE)
    oversample = check_int(oversample, "oversample", 0, _WHERE)
    power_iters = check_int(power_iters, "power_iters", 0, _WHERE)
    block_size = check_int(block_size, "block_size", 1, _WHERE)
    if seed is not None:
        check_int(seed, "seed", 0, _WHERE)
    ops = Ops(A, _WHERE)
    width = min(k + oversample, m, n)
    total = ops.norm(A) ** 2
    At = ops.T(A)
    Q_blocks: list[ArrayT] = []
    B_blocks: list[ArrayT] = []
    captured, done = 0.0, 0
    while done < width:
        size = min(block_size, width - done)
        block_seed = None if seed is None else seed + done
        omega = sketch_operator(sketch, size, n, block_seed, _WHERE).T
        Y = _orthogonal_to(ops, A @ omega, Q_blocks)  # type: ignore[operator]
        for _ in range(power_iters):
            Y = _orthogonal_to(ops, A @ ops.qr(At @ Y), Q_blocks)
        B = ops.T(Y) @ A
        Q_blocks.append(Y)
        B_blocks.append(B)
        done += size
        captured += ops.norm(B) ** 2
        if tol > 0.0 and total - captured <= (tol * tol) * total:
            break
    Q, B = ops.concat(Q_blocks, 1), ops.concat(B_blocks, 0)
    Ub, S, Vt = ops.svd(B)
    rank = min(k, done)
    if tol > 0.0:  # the smallest rank whose estimated error (what Q misses + the dropped tail) meets tol
        kept = 0.0
        for r, value in enumerate(S[:rank], start=1):
            kept += float(value) ** 2
            if total - kept <= (tol * tol) * total:
                rank = r
                break
    return (Q @ Ub[:, :rank]), S[:rank], ops.T(Vt[:rank])  # type: ignore[return-value]


def _orthogonal_to(ops: Ops, Y: ArrayT, Q_blocks: list[ArrayT]) -> ArrayT:
    """An orthonormal basis of Y's columns with the span of the earlier blocks projected out
    (twice: classical Gram–Schmidt needs the second pass to be orthogonal to working precision)."""
    for _ in range(2 if Q_blocks else 1):
        for Q in Q_blocks:
            Y = Y - Q @ (ops.T(Q) @ Y)  # type: ignore[operator]
        Y = ops.qr(Y)
    return Y
