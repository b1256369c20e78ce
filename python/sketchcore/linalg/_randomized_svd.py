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
    """Truncated randomized SVD with Panther's signature: ``U (m × r), S (r,), V (n × r)`` with
    ``A ≈ U @ diag(S) @ V.T`` (note: V, not Vᵀ), S descending, r ≤ ``k``.

    r is ``k``, or the smallest rank whose estimated relative error ‖A − U diag(S) Vᵀ‖_F / ‖A‖_F is
    ≤ ``tol`` when that is smaller (``tol=0`` always returns k). Works on NumPy arrays, torch
    tensors (CPU or CUDA) and CuPy arrays; results are of A's framework, dtype and device. With the
    defaults the rank-k error is within a few percent of the optimal (Eckart–Young) error on
    decaying spectra. ``sketch``/``seed`` choose the sketch operators (same seed, same result).

    Raises ``ValueError`` naming the argument for a non-2-D A, k outside [1, min(m, n)], a
    negative or non-finite tol, or negative oversample/power_iters, block_size < 1;
    ``TypeError`` for non-integer sizes or an unsupported array type.
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
