"""Randomized linear algebra on sketchcore's own sketch operators.

``rsvd`` is the randomized SVD of Halko, Martinsson and Tropp (SIAM Review 2011): a sketch
``Y = A Ω`` captures the range of ``A`` (``Ω`` of ``rank + oversample`` columns, any sketch
kind: Gaussian, Rademacher, sparse sign, SRHT, ...), a few power iterations sharpen it, and a
small dense SVD of ``Qᵀ A`` finishes. The QR and the small SVD run in the caller's framework
(NumPy/LAPACK, torch on CPU or CUDA, or an array-API namespace), so NumPy in gives NumPy out
and torch in gives torch out, on the same device.
"""
from __future__ import annotations

import sys
from typing import Any, Literal, TypeVar

from sketchcore import sketch as _sketch

__all__ = ["rangefinder", "rsvd"]

ArrayT = TypeVar("ArrayT")
SketchKind = Literal["gaussian", "rademacher", "uniform", "sparse_sign", "countsketch", "srht"]


class _Ops:
    """The few dense operations rsvd needs, in the array's own framework: NumPy, torch and the
    array API standard share the signatures of linalg.qr(mode="reduced") and
    linalg.svd(full_matrices=False); only the transpose is spelled differently."""

    def __init__(self, A: Any):
        torch, np = sys.modules.get("torch"), sys.modules.get("numpy")
        namespace = getattr(A, "__array_namespace__", None)
        if torch is not None and isinstance(A, torch.Tensor):
            self.linalg, self.T = torch.linalg, lambda M: M.mT
        elif np is not None and isinstance(A, np.ndarray):
            self.linalg, self.T = np.linalg, lambda M: M.T
        elif namespace is not None and hasattr(namespace(), "linalg"):
            xp = namespace()
            self.linalg, self.T = xp.linalg, xp.matrix_transpose
        else:
            raise TypeError(f"rsvd: A: expected a NumPy array, a torch tensor or an array with an array-API "
                            f"namespace providing linalg, got {type(A).__module__}.{type(A).__qualname__}")

    def qr(self, M: Any) -> Any:
        return self.linalg.qr(M, mode="reduced")[0]

    def svd(self, M: Any) -> Any:
        return self.linalg.svd(M, full_matrices=False)


def _check_int(value: object, name: str, low: int) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"rsvd: {name}: expected an int, got {type(value).__name__}")
    number = value.__index__()  # type: ignore[attr-defined]
    if number < low:
        raise ValueError(f"rsvd: {name}: expected an integer ≥ {low}, got {number}")
    return int(number)


def _shape(A: Any) -> tuple[int, int]:
    shape = tuple(getattr(A, "shape", ()))
    if len(shape) != 2:
        raise ValueError(f"rsvd: A: expected a 2-D array, got shape {shape}")
    return int(shape[0]), int(shape[1])


def _sized(A: Any, value: object, name: str) -> tuple[int, int, int]:
    """A's shape (m, n) and `value` checked as a size in [1, min(m, n)]."""
    m, n = _shape(A)
    size = _check_int(value, name, 1)
    if size > min(m, n):
        raise ValueError(f"rsvd: {name}: expected at most min(m, n) = {min(m, n)}, got {size}")
    return m, n, size


def _sketch_operator(kind: str, width: int, n: int, seed: int | None) -> _sketch.SketchOperator:
    """Ω as the transpose of a (width × n) operator, so that every kind fits (SRHT needs its
    row count ≤ n rounded up to a power of two; sparse sign needs nnz ≤ width)."""
    makers = {"gaussian": _sketch.gaussian, "rademacher": _sketch.rademacher, "uniform": _sketch.uniform,
              "countsketch": _sketch.countsketch, "srht": _sketch.srht}
    if kind == "sparse_sign":
        return _sketch.sparse_sign(width, n, min(8, width), seed=seed)
    if kind not in makers:
        raise ValueError(f"rsvd: sketch: expected one of {sorted([*makers, 'sparse_sign'])}, got {kind!r}")
    return makers[kind](width, n, seed=seed)


def rangefinder(A: ArrayT, size: int, *, power_iters: int = 2, sketch: SketchKind = "gaussian",
                seed: int | None = None) -> ArrayT:
    """An orthonormal basis Q (m × size) whose span captures the dominant column space of A
    (m × n): Q = orth(A Ω) after ``power_iters`` re-orthonormalized power iterations
    ``Q ← orth(A orth(Aᵀ Q))``. ``size`` ≤ min(m, n)."""
    m, n, size = _sized(A, size, "size")
    power_iters = _check_int(power_iters, "power_iters", 0)
    ops = _Ops(A)
    omega = _sketch_operator(sketch, size, n, seed).T  # n × size, applied without being formed
    Q = ops.qr(A @ omega)
    At = ops.T(A)
    for _ in range(power_iters):
        Q = ops.qr(At @ Q)
        Q = ops.qr(A @ Q)
    return Q  # type: ignore[no-any-return]


def rsvd(A: ArrayT, rank: int, *, oversample: int = 10, power_iters: int = 2, sketch: SketchKind = "gaussian",
         seed: int | None = None) -> tuple[ArrayT, ArrayT, ArrayT]:
    """Randomized truncated SVD: ``U (m × rank), s (rank,), Vt (rank × n)`` with
    ``A ≈ U diag(s) Vt``, s descending.

    With ``power_iters`` = 2 and ``oversample`` = 10 the error is within a few percent of the
    optimal rank-``rank`` error (Eckart–Young) for the spectra of trained layers; more power
    iterations help flat spectra. The sketch is a sketchcore operator (``sketch`` kind,
    ``seed``): the same seed gives the same factors. Raises ``ValueError`` naming the argument
    for a non-2-D ``A``, ``rank`` ≤ 0 or > min(m, n), or a negative ``oversample`` or
    ``power_iters``; ``TypeError`` for non-integers or arrays of an unsupported framework.
    """
    m, n, rank = _sized(A, rank, "rank")
    oversample = _check_int(oversample, "oversample", 0)
    ops = _Ops(A)
    Q = rangefinder(A, min(rank + oversample, m, n), power_iters=power_iters, sketch=sketch, seed=seed)
    B = ops.T(Q) @ A  # (rank + oversample) × n
    Ub, s, Vt = ops.svd(B)
    return (Q @ Ub)[:, :rank], s[:rank], Vt[:rank]
