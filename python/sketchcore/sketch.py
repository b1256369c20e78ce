"""Random sketching operators, identical on every thread count, applied without being
materialized.

Each function returns a :class:`SketchOperator` of shape ``(m, n)`` whose entries are a
pure function of ``(kind, m, n, seed, nnz, scale)`` and their position (Philox4x32-10; the
mapping is documented in ``sketchcore/sketch.hpp``). With ``scale=True`` the operator is
scaled so that ``E[S.T @ S] = I``.

>>> S = sketchcore.sketch.srht(256, 4096, seed=1)
>>> Y = S @ A            # (256, p) from A of shape (4096, p), in O(n log n · p)
>>> Z = B @ S            # (q, 4096) from B of shape (q, 256)
>>> D = S.to_dense()     # the same entries, materialized
"""
from __future__ import annotations


from numbers import Integral
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from sketchcore import _framework, _sketch

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

# Results are arrays of the operand's framework and dtype: NumPy in, NumPy out; torch in, torch out.
ArrayT = TypeVar("ArrayT")

__all__ = ["SketchOperator", "countsketch", "gaussian", "jl_min_dim", "rademacher", "sparse_sign", "srht", "uniform"]


class SketchOperator:
    """A sketching operator of shape ``(m, n)`` (``(n, m)`` for its transpose ``.T``).

    ``S @ A`` applies it on the left (``A`` of shape ``(n, p)`` or ``(..., n, p)``, or a
    vector ``(n,)``), ``A @ S`` on the right (``A`` of shape ``(..., p, m)``); the result is
    an array of ``A``'s framework and dtype (float32 or float64). Sparse and SRHT operators
    are never formed; dense ones are generated tile by tile into pooled memory.
    """

    __array_ufunc__ = None  # lets `ndarray @ operator` reach __rmatmul__
    __array_priority__ = 1000

    def __init__(self, kind: str, m: int, n: int, seed: int, nnz: int = 1, scale: bool = True,
                 transposed: bool = False):
        _sketch.validate(kind, m, n, seed, nnz, bool(scale))
        self.kind, self.m, self.n, self.seed, self.nnz = kind, m, n, seed, nnz
        self.scale, self.transposed = bool(scale), transposed

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.m) if self.transposed else (self.m, self.n)

    @property
    def T(self) -> SketchOperator:  # noqa: N802 - the usual name of a transpose
        """The transposed operator (same entries, no copy)."""
        return SketchOperator(self.kind, self.m, self.n, self.seed, self.nnz, self.scale, not self.transposed)

    def _args(self) -> tuple[str, int, int, int, int, bool]:
        return self.kind, self.m, self.n, self.seed, self.nnz, self.scale

    @overload
    def to_dense(self, dtype: npt.DTypeLike = None, like: None = None) -> npt.NDArray[Any]: ...
    @overload
    def to_dense(self, dtype: Any = None, *, like: ArrayT) -> ArrayT: ...
    @overload
    def to_dense(self, dtype: Any, like: ArrayT) -> ArrayT: ...

    def to_dense(self, dtype: Any = None, like: Any = None) -> Any:
        """The operator as a dense array: of ``like``'s framework and device when given,
        else NumPy. ``dtype`` defaults to ``like``'s dtype, else float64."""
        import numpy as np
        if like is None:
            out = np.empty((self.m, self.n), dtype=np.dtype(dtype or "float64"))
        else:
            if not hasattr(like, "__dlpack__"):
                raise TypeError(f"like: expected an array (numpy, torch, or an array-API namespace), "
                                f"got {type(like).__name__}")
            out = _framework.empty_like(like, (self.m, self.n), dtype)
        _sketch.to_dense(*self._args(), out)
        return out.T if self.transposed else out

    def block(self, rows: slice | int, cols: slice | int, dtype: npt.DTypeLike = None) -> npt.NDArray[Any]:
        """Rows ``rows`` × columns ``cols`` of the operator as a NumPy array, generated on
        their own: bit-identical to the same block of ``to_dense()``. Each index is a
        unit-step slice or an int; an int selects one row (column) and drops that
        dimension, as NumPy indexing does (``S.block(3, slice(None))`` is row 3, 1-D)."""
        import numpy as np
        m, n = self.shape
        r0, r1 = _block_range(rows, m, "rows")
        c0, c1 = _block_range(cols, n, "cols")
        if self.transposed:
            r0, r1, c0, c1 = c0, c1, r0, r1
        out = np.empty((max(r1 - r0, 0), max(c1 - c0, 0)), dtype=np.dtype(dtype or "float64"))
        if out.size:
            _sketch.to_dense(*self._args(), out, r0, c0)
        result = out.T if self.transposed else out
        if not isinstance(cols, slice):
            result = result[:, 0]
        if not isinstance(rows, slice):
            result = result[0]
        return result

    def apply(self, A: ArrayT, side: Literal["left", "right"] = "left", out: ArrayT | None = None) -> ArrayT:
        """``self @ A`` (side="left") or ``A @ self`` (side="right"), into ``out`` if given."""
        if side not in ("left", "right"):
            raise ValueError(f"side: expected 'left' or 'right', got {side!r}")
        return _sketch.apply(*self._args(), A, side == "right", self.transposed, out)

    def __matmul__(self, A: ArrayT) -> ArrayT:
        if isinstance(A, SketchOperator):
            return NotImplemented  # type: ignore[unreachable]
        return self.apply(A, "left")

    def __rmatmul__(self, A: ArrayT) -> ArrayT:
        return self.apply(A, "right")

    def __repr__(self) -> str:
        extra = f", nnz={self.nnz}" if self.kind == "sparse_sign" else ""
        t = ".T" if self.transposed else ""
        return f"sketchcore.sketch.{self.kind}({self.m}, {self.n}, seed={self.seed}{extra}, scale={self.scale}){t}"


def _block_range(index: object, extent: int, name: str) -> tuple[int, int]:
    """[begin, end) selected by a unit-step slice or an int along an axis of `extent`."""
    if isinstance(index, slice):
        begin, end, step = index.indices(extent)
        if step != 1:
            raise ValueError(f"block: {name}: expected a slice with step 1, got step {step}")
        return begin, max(begin, end)
    if isinstance(index, bool) or not isinstance(index, Integral):
        raise TypeError(f"block: {name}: expected a slice or an int, got {type(index).__name__}")
    i = int(index)
    if not -extent <= i < extent:
        raise IndexError(f"block: {name}: expected an index in [-{extent}, {extent}), got {i}")
    i %= extent
    return i, i + 1


def _seed(seed: object) -> int:
    drawn = _framework.checked_seed(seed, "sketch", draw=True)
    assert drawn is not None
    return drawn


def _extent(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if not -(2**63) <= value < 2**63:  # the core checks the range, once the value fits its int64
        expected = "[1, m]" if name == "nnz" else "[1, 2^31)"
        raise ValueError(f"sketch: {name}: expected an integer in {expected}, got {value}")
    return int(value)


def _make(kind: str, m: int, n: int, seed: int | None, nnz: int = 1, scale: bool = True) -> SketchOperator:
    return SketchOperator(kind, _extent(m, "m"), _extent(n, "n"), _seed(seed), _extent(nnz, "nnz"), scale)


def gaussian(m: int, n: int, *, seed: int | None = None, scale: bool = True) -> SketchOperator:
    """Entries N(0, 1/m) (N(0, 1) unscaled)."""
    return _make("gaussian", m, n, seed, scale=scale)


def rademacher(m: int, n: int, *, seed: int | None = None, scale: bool = True) -> SketchOperator:
    """Entries ±1/√m (±1 unscaled): Panther's scaled sign sketch."""
    return _make("rademacher", m, n, seed, scale=scale)


def uniform(m: int, n: int, *, seed: int | None = None, scale: bool = True) -> SketchOperator:
    """Entries uniform on [−√(3/m), √(3/m)] (variance 1/m; [−√3, √3] unscaled)."""
    return _make("uniform", m, n, seed, scale=scale)


def sparse_sign(m: int, n: int, nnz: int = 8, *, seed: int | None = None, scale: bool = True) -> SketchOperator:
    """Exactly ``nnz`` nonzeros ±1/√nnz per column at distinct rows (±1 unscaled); an SJLT.
    ``nnz`` must lie in [1, m]; ``min(nnz, m)`` is not applied silently."""
    return _make("sparse_sign", m, n, seed, nnz, scale)


def countsketch(m: int, n: int, *, seed: int | None = None, scale: bool = True) -> SketchOperator:
    """One ±1 per column at a random row (a sparse sign sketch with nnz = 1)."""
    return _make("countsketch", m, n, seed, 1, scale)


def srht(m: int, n: int, *, seed: int | None = None, scale: bool = True) -> SketchOperator:
    """Subsampled randomized Hadamard transform √(n'/m)·R·H·D (n' = n rounded up to a power
    of two, H orthonormal, D random signs, R m distinct rows), restricted to n columns.
    Applied in O(n' log n') per vector; requires m ≤ n'."""
    return _make("srht", m, n, seed, 1, scale)


@overload
def jl_min_dim(n_samples: int, eps: float = 0.1) -> int: ...
@overload
def jl_min_dim(n_samples: npt.ArrayLike, eps: npt.ArrayLike = 0.1) -> npt.NDArray[np.int64]: ...


def jl_min_dim(n_samples: Any, eps: Any = 0.1) -> Any:
    """Smallest safe sketch dimension by the Johnson–Lindenstrauss lemma, with the same
    formula as scikit-learn's ``johnson_lindenstrauss_min_dim``:
    ``4·ln(n_samples) / (eps²/2 − eps³/3)``, rounded down. Scalars give an int; arrays
    (NumPy broadcasting) give an int64 array."""
    import numpy as np
    eps_arr = np.asarray(eps, dtype=float)
    n_arr = np.asarray(n_samples)
    if np.any(eps_arr <= 0.0) or np.any(eps_arr >= 1):
        raise ValueError(f"jl_min_dim: eps: expected values in (0, 1), got {eps!r}")
    if not np.issubdtype(n_arr.dtype, np.number) or np.any(n_arr <= 0):
        raise ValueError(f"jl_min_dim: n_samples: expected positive numbers, got {n_samples!r}")
    denominator = eps_arr**2 / 2 - eps_arr**3 / 3
    result = (4 * np.log(n_arr) / denominator).astype(np.int64)
    return int(result) if result.ndim == 0 else result



