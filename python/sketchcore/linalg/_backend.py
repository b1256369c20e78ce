"""The dense operations the randomized algorithms need, in the array's own framework (NumPy,
torch on CPU or CUDA, CuPy, or an array-API namespace), and the argument checks they share.

NumPy, torch and the array API standard share the signatures of ``linalg.qr(mode="reduced")``
and ``linalg.svd(full_matrices=False)``; transposes, concatenation, triangular solves and host
copies are spelled differently and are wrapped here."""
from __future__ import annotations

import math
import sys
from typing import Any, Literal

from sketchcore import sketch as _sketch

SketchKind = Literal["gaussian", "rademacher", "uniform", "sparse_sign", "countsketch", "srht"]


class Ops:
    """Dense linear algebra on arrays of ``A``'s framework; ``where`` names the calling function
    in error messages."""

    def __init__(self, A: Any, where: str = "rsvd", name: str = "A"):
        torch, np = sys.modules.get("torch"), sys.modules.get("numpy")
        namespace = getattr(A, "__array_namespace__", None)
        self.where, self.name = where, name
        if torch is not None and isinstance(A, torch.Tensor):
            self.kind, self.xp, self.linalg, self.T = "torch", torch, torch.linalg, lambda M: M.mT
        elif np is not None and isinstance(A, np.ndarray):
            self.kind, self.xp, self.linalg, self.T = "numpy", np, np.linalg, lambda M: M.T
        elif type(A).__module__.split(".")[0] == "cupy":
            cupy = sys.modules["cupy"]
            self.kind, self.xp, self.linalg, self.T = "cupy", cupy, cupy.linalg, lambda M: M.T
        elif namespace is not None and hasattr(namespace(), "linalg"):
            xp = namespace()
            self.kind, self.xp, self.linalg, self.T = "array-api", xp, xp.linalg, xp.matrix_transpose
        else:
            raise TypeError(f"{where}: {name}: expected a NumPy array, a torch tensor or an array with an array-API "
                            f"namespace providing linalg, got {type(A).__module__}.{type(A).__qualname__}")

    def qr(self, M: Any) -> Any:
        return self.linalg.qr(M, mode="reduced")[0]

    def svd(self, M: Any) -> Any:
        return self.linalg.svd(M, full_matrices=False)

    def norm(self, M: Any) -> float:
        """The Frobenius norm as a Python float."""
        return float(self.linalg.norm(M) if self.kind != "array-api" else self.linalg.vector_norm(M))

    def concat(self, parts: list[Any], axis: int) -> Any:
        if self.kind == "torch":
            return self.xp.cat(parts, dim=axis)
        return self.xp.concat(parts, axis=axis) if self.kind == "array-api" else self.xp.concatenate(parts, axis=axis)

    def require_dense(self) -> None:
        """cqrrpt needs Cholesky and triangular solves: NumPy, torch or CuPy only."""
        if self.kind == "array-api":
            raise TypeError(f"{self.where}: {self.name}: expected a NumPy array, a torch tensor or a CuPy array, got an "
                            f"array-API array of {self.xp.__name__}")

    def cholesky(self, G: Any) -> Any:
        """Lower-triangular L with G = L Lᵀ, or None when G is not numerically positive definite."""
        try:
            L = self.linalg.cholesky(G)
        except Exception:  # LinAlgError (NumPy, CuPy) or torch's _LinAlgError; each framework its own type
            return None
        finite = bool(self.xp.isfinite(L).all())  # CuPy returns NaNs instead of raising
        return L if finite else None

    def solve_upper_right(self, B: Any, U: Any) -> Any:
        """X with X U = B for an upper-triangular U."""
        if self.kind == "torch":
            return self.xp.linalg.solve_triangular(U, B, upper=True, left=False)
        if self.kind == "cupy":
            from cupyx.scipy.linalg import solve_triangular
            return solve_triangular(U, B.T, trans="T", lower=False).T
        try:
            from scipy.linalg import solve_triangular as scipy_solve
        except ImportError:  # SciPy is optional: a general solve of the small k × k system
            return self.xp.linalg.solve(U.T, B.T).T
        return scipy_solve(U, B.T, trans="T", lower=False, check_finite=False).T

    def to_host(self, M: Any) -> Any:
        """A float64 NumPy copy of a small array."""
        import numpy as np
        if self.kind == "torch":
            return M.detach().to("cpu", self.xp.float64).numpy()
        if self.kind == "cupy":
            return M.get().astype(np.float64)
        return np.asarray(M, dtype=np.float64)

    def from_host(self, a: Any, like: Any, integer: bool = False) -> Any:
        """NumPy ``a`` as an array of ``like``'s framework, device and (unless ``integer``) dtype."""
        if self.kind == "torch":
            dtype = self.xp.int64 if integer else like.dtype
            return self.xp.as_tensor(a, dtype=dtype, device=like.device)
        dtype = "int64" if integer else like.dtype
        return self.xp.asarray(a, dtype=dtype)


def check_int(value: object, name: str, low: int, where: str = "rsvd") -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{where}: {name}: expected an int, got {type(value).__name__}")
    number = value.__index__()  # type: ignore[attr-defined]
    if number < low:
        raise ValueError(f"{where}: {name}: expected an integer ≥ {low}, got {number}")
    return int(number)


def check_float(value: object, name: str, low: float, where: str, *, inclusive: bool = True) -> float:
    """A real number ≥ ``low`` (> ``low`` unless ``inclusive``), finite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
        raise TypeError(f"{where}: {name}: expected a real number, got {type(value).__name__}")
    number = float(value)  # type: ignore[arg-type]
    if not math.isfinite(number) or number < low or (not inclusive and number == low):
        bound = "≥" if inclusive else ">"
        raise ValueError(f"{where}: {name}: expected a finite number {bound} {low}, got {value!r}")
    return number


def shape2d(A: Any, where: str = "rsvd", name: str = "A") -> tuple[int, int]:
    shape = tuple(getattr(A, "shape", ()))
    if len(shape) != 2:
        raise ValueError(f"{where}: {name}: expected a 2-D array, got shape {shape}")
    return int(shape[0]), int(shape[1])


def sized(A: Any, value: object, name: str, where: str = "rsvd") -> tuple[int, int, int]:
    """A's shape (m, n) and `value` checked as a size in [1, min(m, n)]."""
    m, n = shape2d(A, where)
    size = check_int(value, name, 1, where)
    if size > min(m, n):
        raise ValueError(f"{where}: {name}: expected at most min(m, n) = {min(m, n)}, got {size}")
    return m, n, size


def sketch_operator(kind: str, width: int, n: int, seed: int | None, where: str) -> _sketch.SketchOperator:
    """A (width × n) sketch operator of any kind (SRHT needs width ≤ n rounded up to a power of
    two; sparse sign uses nnz = min(8, width))."""
    makers = {"gaussian": _sketch.gaussian, "rademacher": _sketch.rademacher, "uniform": _sketch.uniform,
              "countsketch": _sketch.countsketch, "srht": _sketch.srht}
    if kind == "sparse_sign":
        return _sketch.sparse_sign(width, n, min(8, width), seed=seed)
    if kind not in makers:
        raise ValueError(f"{where}: sketch: expected one of {sorted([*makers, 'sparse_sign'])}, got {kind!r}")
    return makers[kind](width, n, seed=seed)
