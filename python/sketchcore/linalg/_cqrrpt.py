"""``cqrrpt``: randomized Cholesky QR with column pivoting (Melnichenko, Balabanov, Murray,
Demmel, Mahoney, Luszczek, "CholeskyQR with Randomization and Pivoting for Tall Matrices", 2023).

For M (m × n): sketch it to M_sk = S M (d × n, d = ⌈γ n⌉, a sparse-sign operator of sketchcore's
by default, applied without being formed), pivot-QR the small sketch (M_sk[:, J] = Q_sk R_sk; LAPACK
GEQP3 through SciPy when installed), keep the k columns whose ``abs(R_sk[i, i])`` exceed ``tol * abs(R_sk[0, 0])``
(the numerical rank), precondition M_pre = M[:, J[:k]] R_sk[:k, :k]⁻¹ (well conditioned, because S
embeds the column space), and finish with one Cholesky QR of M_pre: Q = M_pre L⁻ᵀ, R = Lᵀ R_sk[:k].
Then M[:, J] ≈ Q R with Q (m × k) orthonormal and R (k × n) upper triangular (upper trapezoidal
when k < n). The only pass over M besides the sketch is the Gram matrix and the triangular solve,
O(m k²); the pivoting costs O(d n²) on the sketch. When the Cholesky factor is ill conditioned
(possible near the rank threshold, or in float32) a second Cholesky QR pass restores
orthogonality to working precision.
"""
from __future__ import annotations

import math
from typing import Any, TypeVar

from sketchcore.linalg._backend import Ops, SketchKind, check_float, check_int, shape2d, sketch_operator

__all__ = ["cqrrpt"]

ArrayT = TypeVar("ArrayT")

_WHERE = "cqrrpt"
#: A second Cholesky QR pass runs when the first one's factor has a diagonal spread above this
#: (orthogonality loss ≈ unit roundoff × κ², κ ≥ the spread).
_REFINE_SPREAD = {8: 1e2, 4: 1.0}


def _pivoted_qr_r(A: Any) -> tuple[Any, Any]:
    """R (min(d, n) × n) and the 0-based pivots J of the column-pivoted QR A[:, J] = Q R of a
    small float64 NumPy array: LAPACK GEQP3 through SciPy, else Householder with pivoting."""
    try:
        from scipy.linalg import qr
    except ImportError:
        return _householder_pivoted_r(A)
    R, J = qr(A, mode="r", pivoting=True, check_finite=False)
    return R[: min(A.shape)], J


def _householder_pivoted_r(A: Any) -> tuple[Any, Any]:
    """Businger–Golub Householder QR with column pivoting, in NumPy (the SciPy-less path)."""
    import numpy as np
    A = np.array(A, dtype=np.float64)
    d, n = A.shape
    J = np.arange(n)
    for j in range(min(d, n)):
        norms = np.einsum("ij,ij->j", A[j:, j:], A[j:, j:])
        p = j + int(np.argmax(norms))
        A[:, [j, p]], J[[j, p]] = A[:, [p, j]], J[[p, j]]
        x = A[j:, j]
        alpha = -math.copysign(float(np.linalg.norm(x)), float(x[0]))
        v = x.copy()
        v[0] -= alpha
        vnorm = float(np.linalg.norm(v))
        if vnorm > 0.0:
            v /= vnorm
            A[j:, j:] -= 2.0 * np.outer(v, v @ A[j:, j:])
    return np.triu(A[: min(d, n)]), J


def _numerical_rank(R: Any, tol: float) -> int:
    diagonal = abs(R.diagonal())
    if diagonal.size == 0 or diagonal[0] == 0.0:
        return 0
    return int((diagonal > tol * diagonal[0]).sum())


def cqrrpt(M: ArrayT, gamma: float = 1.25, *, tol: float | None = None, sketch: SketchKind = "sparse_sign",
           seed: int | None = None) -> tuple[ArrayT, ArrayT, ArrayT]:
    """Randomized Cholesky QR with column pivoting: ``Q, R, J`` with ``M[:, J] ≈ Q @ R``.

    ``M`` is an (m × n) NumPy array, torch tensor or CuPy array (float32 or float64); Q (m × k)
    has orthonormal columns, R (k × n) is upper triangular (trapezoidal when k < n), J is a
    permutation of range(n) (int64, same framework and device), with k the numerical rank that
    the pivoted QR of the sketch reveals: the number of ``abs(R_sk[i, i])`` above
    ``tol * abs(R_sk[0, 0])`` (default: 10·max(d, n)·eps of M's dtype). The leading pivots are the
    most independent columns, and ``abs(R[i, i])`` decays like the singular values. ``gamma`` ≥ 1
    sets the sketch size d = min(⌈γ n⌉, m) (Panther's default 1.25); for d = m no sketch is needed
    and M itself is pivoted. ``sketch`` and ``seed`` choose the sketch operator (same seed, same
    result).

    Parameters
    ----------
    M : array (m × n)
        NumPy array, torch tensor (CPU or CUDA) or CuPy array of float32 or float64, finite.
    gamma : float, default 1.25
        Sketch oversampling factor, ≥ 1: the sketch has d = min(⌈γ n⌉, m) rows. When the rank comes
        out below min(m, n) and the discarded columns do not lie near span(Q) (a sketch that did not
        embed M's columns, possible with γ near 1), it is drawn again with twice the rows (seed + 1),
        up to d = m.
    tol : float, optional
        Relative threshold ≥ 0 on the sketch's pivoted-R diagonal that sets the numerical rank k;
        default 10·max(d, n)·eps of M's dtype.
    sketch : str, default "sparse_sign"
        Kind of sketch operator (``"gaussian"``, ``"rademacher"``, ``"sparse_sign"``, ...).
    seed : int, optional
        Seed ≥ 0 of the sketch operator; the same seed gives the same factors.

    Returns
    -------
    Q : array (m × k)
        Orthonormal columns, M's framework, dtype and device.
    R : array (k × n)
        Upper triangular (trapezoidal when k < n).
    J : array (n,)
        int64 column permutation with ``M[:, J] ≈ Q @ R``. For the zero matrix k = 0.

    Raises
    ------
    ValueError
        ``"cqrrpt: M: expected a 2-D array, got shape ..."``, ``"cqrrpt: M: expected a non-empty
        matrix, ..."``, ``"cqrrpt: M: expected finite entries, got NaN or infinity"``,
        ``"cqrrpt: gamma: expected a finite number ≥ 1.0, ..."``, ``"cqrrpt: tol: expected a finite
        number ≥ 0.0, ..."``, ``"cqrrpt: seed: expected an integer ≥ 0, ..."``, ``"cqrrpt: sketch:
        expected one of [...]"``, or ``"cqrrpt: M: Cholesky QR failed at every rank; ..."`` when
        ``tol`` is too small for M's conditioning.
    TypeError
        For an unsupported array type (``"cqrrpt: M: expected a NumPy array, a torch tensor or a
        CuPy array, ..."``), an integer dtype (``"cqrrpt: M: expected float32 or float64, got
        ..."``), or a non-number gamma/tol or non-integer seed.

    Examples
    --------
    >>> import numpy as np
    >>> from sketchcore.linalg import cqrrpt
    >>> rng = np.random.default_rng(0)
    >>> M = rng.standard_normal((200, 8)) @ rng.standard_normal((8, 30))  # rank 8
    >>> Q, R, J = cqrrpt(M, seed=0)
    >>> Q.shape, R.shape, J.shape
    ((200, 8), (8, 30), (30,))
    >>> bool(np.allclose(M[:, J], Q @ R)), bool(np.allclose(Q.T @ Q, np.eye(8)))
    (True, True)
    >>> sorted(J.tolist()) == list(range(30))
    True
    """
    ops = Ops(M, _WHERE, "M")
    ops.require_dense()
    m, n = shape2d(M, _WHERE, "M")
    gamma = check_float(gamma, "gamma", 1.0, _WHERE)
    itemsize = _itemsize(M, ops)
    eps = 2.0 ** -52 if itemsize == 8 else 2.0 ** -23
    if seed is not None:
        check_int(seed, "seed", 0, _WHERE)
    d = min(max(1, math.ceil(gamma * n)), m)
    tol = 10.0 * max(d, n) * eps if tol is None else check_float(tol, "tol", 0.0, _WHERE)
    if m == 0 or n == 0:
        raise ValueError(f"{_WHERE}: M: expected a non-empty matrix, got shape {(m, n)}")
    while True:
        Q, R, J, k = _factor(M, ops, d, m, sketch, seed, tol, itemsize)
        # A sketch that does not embed M's column space (possible with γ near 1: hypothesis found
        # a 65 × 22 matrix whose d = 22 SRHT sketch lost a column) shows as a rank k < min(m, n)
        # whose discarded columns M does not lie near span(Q): check them, and sketch again, twice
        # as large, up to d = m (the pivoted QR of M itself).
        if k >= min(m, n) or d == m or _discarded_columns_fit(M, Q, R, J, k, tol, ops, seed):
            return Q, R, J
        d = min(2 * d, m)
        seed = None if seed is None else (seed + 1) % 2**64


def _factor(M: Any, ops: Ops, d: int, m: int, sketch: SketchKind, seed: int | None, tol: float,
            itemsize: int) -> tuple[Any, Any, Any, int]:
    """One attempt with a sketch of d rows: (Q, R, J, k)."""
    M_sk = M if d == m else sketch_operator(sketch, d, m, seed, _WHERE) @ M
    host = ops.to_host(M_sk)
    import numpy as np
    if not np.isfinite(host).all():
        raise ValueError(f"{_WHERE}: M: expected finite entries, got NaN or infinity")
    R_sk, J_host = _pivoted_qr_r(host)
    J = ops.from_host(J_host, M, integer=True)
    k = _numerical_rank(R_sk, tol)
    if k == 0:  # the zero matrix: an empty factorization is exact
        return ops.xp.zeros((m, 0), dtype=M.dtype, **_device(M, ops)), ops.from_host(np.zeros((0, M.shape[1])), M), J, 0  # type: ignore[attr-defined]
    R_sk = ops.from_host(R_sk[:k], M)
    M_pre = ops.solve_upper_right(M[:, J[:k]], R_sk[:, :k])  # type: ignore[index]
    Q, R = M_pre, R_sk
    for _ in range(2):  # one Cholesky QR pass, and a second one if the first lost orthogonality
        L = ops.cholesky(ops.T(Q) @ Q)
        while L is None:  # the rank threshold kept a column the sketch could not resolve: drop it
            k -= 1
            if k == 0:
                raise ValueError(f"{_WHERE}: M: Cholesky QR failed at every rank; tol={tol!r} is too small "
                                 "for this matrix's conditioning (expected a larger tol)")
            Q, R = Q[:, :k], R[:k]
            L = ops.cholesky(ops.T(Q) @ Q)
        Lt = ops.T(L)
        Q, R = ops.solve_upper_right(Q, Lt), Lt @ R
        diagonal = abs(ops.to_host(L).diagonal())
        if diagonal.max() <= _REFINE_SPREAD[itemsize] * diagonal.min():
            break
    return Q, R, J, k


def _discarded_columns_fit(M: Any, Q: Any, R: Any, J: Any, k: int, tol: float, ops: Ops, seed: int | None) -> bool:
    """Whether the columns the rank threshold discarded lie as near span(Q) as a pivoted QR
    truncated there leaves them when the sketch embeds M's columns: each residual column within
    tol·|R_00| (R_00 = the largest column's norm), with 10× room for the embedding's distortion.
    Checked on four random combinations of them, (M P − Q R[:, k:] W) with P scattering W into
    the discarded columns' rows: O(m·n) work and an m × 4 host copy, not a copy of M."""
    import numpy as np
    n = int(J.shape[0])
    W = np.random.default_rng(0 if seed is None else seed).standard_normal((n - k, 4))
    P = np.zeros((n, 4))
    P[ops.to_host(J[k:]).astype(np.int64)] = W
    probe = ops.to_host(M @ ops.from_host(P, M) - Q @ (R[:, k:] @ ops.from_host(W, M)))
    # ‖res W‖_F ≤ ‖res‖_F ‖W‖_F and ‖res‖_F ≤ √(n − k) · max_j ‖res_j‖.
    r00 = abs(float(ops.to_host(R[:1, :1])[0, 0])) if k > 0 else 0.0  # k = 0: only M = 0 fits
    bound = 10.0 * tol * r00 * math.sqrt(n - k) * np.linalg.norm(W)
    return bool(np.linalg.norm(probe) <= bound)


def _itemsize(M: Any, ops: Ops) -> int:
    if ops.kind == "torch":
        if not M.dtype.is_floating_point or M.dtype.itemsize not in (4, 8):
            raise TypeError(f"{_WHERE}: M: expected float32 or float64, got {M.dtype}")
        return int(M.dtype.itemsize)
    kind, size = M.dtype.kind, M.dtype.itemsize
    if kind != "f" or size not in (4, 8):
        raise TypeError(f"{_WHERE}: M: expected float32 or float64, got {M.dtype}")
    return int(size)


def _device(M: Any, ops: Ops) -> dict[str, Any]:
    return {"device": M.device} if ops.kind == "torch" else {}
