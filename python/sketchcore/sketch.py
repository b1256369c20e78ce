"""Random sketching operators, identical on every thread count, applied without being
materialized.

Each function returns a :class:`SketchOperator` of shape ``(m, n)`` whose entries are a
pure function of ``(kind, m, n, seed, nnz, scale)`` and their position (Philox4x32-10; the
mapping is documented in ``sketchcore/sketch.hpp``). With ``scale=True`` the operator is
scaled so that ``E[S.T @ S] = I``.

>>> import numpy as np
>>> from sketchcore import sketch
>>> S = sketch.srht(256, 4096, seed=1)
>>> A, B = np.ones((4096, 3)), np.ones((5, 256))
>>> (S @ A).shape        # (256, p) from A of shape (4096, p), in O(n log n · p)
(256, 3)
>>> (B @ S).shape        # (q, 4096) from B of shape (q, 256)
(5, 4096)
>>> D = S.to_dense()     # the same entries, materialized
>>> bool(np.allclose(D @ A, S @ A))
True
"""
from __future__ import annotations


from numbers import Integral
from typing import TYPE_CHECKING, Any, overload

from sketchcore import _framework
from sketchcore._sketch_operator import SketchOperator

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["SketchOperator", "countsketch", "gaussian", "jl_min_dim", "rademacher", "sparse_sign", "srht", "uniform"]


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
    """Entries N(0, 1/m) (N(0, 1) unscaled).

    Parameters
    ----------
    m, n : int
        The operator's shape ``(m, n)``: it maps vectors of length ``n`` to length ``m``.
        Each in [1, 2**31).
    seed : int, optional
        In [0, 2**64); ``None`` draws a fresh seed. The same seed gives the same entries on
        any thread count and device.
    scale : bool, default True
        Entries N(0, 1/m) (``False``: N(0, 1)).

    Returns
    -------
    SketchOperator

    Raises
    ------
    TypeError
        ``m``, ``n`` or ``seed`` is not an int.
    ValueError
        An extent or the seed out of range.

    Examples
    --------
    >>> import numpy as np
    >>> from sketchcore import sketch
    >>> S = sketch.gaussian(256, 1000, seed=0)
    >>> x = np.random.default_rng(0).standard_normal(1000)
    >>> bool(0.8 < np.linalg.norm(S @ x) / np.linalg.norm(x) < 1.2)
    True
    """
    return _make("gaussian", m, n, seed, scale=scale)


def rademacher(m: int, n: int, *, seed: int | None = None, scale: bool = True) -> SketchOperator:
    """Entries ±1/√m (±1 unscaled): Panther's scaled sign sketch.

    Parameters
    ----------
    m, n : int
        The operator's shape ``(m, n)``: it maps vectors of length ``n`` to length ``m``.
        Each in [1, 2**31).
    seed : int, optional
        In [0, 2**64); ``None`` draws a fresh seed. The same seed gives the same entries on
        any thread count and device.
    scale : bool, default True
        Entries ±1/√m (``False``: ±1).

    Returns
    -------
    SketchOperator

    Raises
    ------
    TypeError
        ``m``, ``n`` or ``seed`` is not an int.
    ValueError
        An extent or the seed out of range.

    Examples
    --------
    >>> import numpy as np
    >>> from sketchcore import sketch
    >>> sorted(set(sketch.rademacher(4, 10, seed=0, scale=False).to_dense().ravel().tolist()))
    [-1.0, 1.0]
    """
    return _make("rademacher", m, n, seed, scale=scale)


def uniform(m: int, n: int, *, seed: int | None = None, scale: bool = True) -> SketchOperator:
    """Entries uniform on [−√(3/m), √(3/m)] (variance 1/m; [−√3, √3] unscaled).

    Parameters
    ----------
    m, n : int
        The operator's shape ``(m, n)``: it maps vectors of length ``n`` to length ``m``.
        Each in [1, 2**31).
    seed : int, optional
        In [0, 2**64); ``None`` draws a fresh seed. The same seed gives the same entries on
        any thread count and device.
    scale : bool, default True
        Entries uniform on [−√(3/m), √(3/m)] (``False``: on [−√3, √3]).

    Returns
    -------
    SketchOperator

    Raises
    ------
    TypeError
        ``m``, ``n`` or ``seed`` is not an int.
    ValueError
        An extent or the seed out of range.

    Examples
    --------
    >>> import numpy as np
    >>> from sketchcore import sketch
    >>> D = sketch.uniform(3, 1000, seed=0).to_dense()
    >>> bool(np.abs(D).max() <= np.sqrt(3 / 3))
    True
    """
    return _make("uniform", m, n, seed, scale=scale)


def sparse_sign(m: int, n: int, nnz: int = 8, *, seed: int | None = None, scale: bool = True) -> SketchOperator:
    """Exactly ``nnz`` nonzeros ±1/√nnz per column at distinct rows (±1 unscaled); an SJLT.
    ``nnz`` must lie in [1, m]; ``min(nnz, m)`` is not applied silently.

    Parameters
    ----------
    m, n : int
        The operator's shape ``(m, n)``: it maps vectors of length ``n`` to length ``m``.
        Each in [1, 2**31).
    nnz : int, default 8
        Nonzeros per column, in [1, m].
    seed : int, optional
        In [0, 2**64); ``None`` draws a fresh seed. The same seed gives the same entries on
        any thread count and device.
    scale : bool, default True
        Nonzeros ±1/√nnz (``False``: ±1).

    Returns
    -------
    SketchOperator

    Raises
    ------
    TypeError
        ``m``, ``n``, ``nnz`` or ``seed`` is not an int.
    ValueError
        An extent or the seed out of range, or ``nnz`` outside [1, m].

    Examples
    --------
    >>> import numpy as np
    >>> from sketchcore import sketch
    >>> D = sketch.sparse_sign(32, 100, 4, seed=0).to_dense()
    >>> set((D != 0).sum(axis=0).tolist())
    {4}
    """
    return _make("sparse_sign", m, n, seed, nnz, scale)


def countsketch(m: int, n: int, *, seed: int | None = None, scale: bool = True) -> SketchOperator:
    """One ±1 per column at a random row (a sparse sign sketch with nnz = 1).

    Parameters
    ----------
    m, n : int
        The operator's shape ``(m, n)``: it maps vectors of length ``n`` to length ``m``.
        Each in [1, 2**31).
    seed : int, optional
        In [0, 2**64); ``None`` draws a fresh seed. The same seed gives the same entries on
        any thread count and device.
    scale : bool, default True
        Has no effect on the entries (±1 either way): a single nonzero per column needs no scaling.

    Returns
    -------
    SketchOperator

    Raises
    ------
    TypeError
        ``m``, ``n`` or ``seed`` is not an int.
    ValueError
        An extent or the seed out of range.

    Examples
    --------
    >>> import numpy as np
    >>> from sketchcore import sketch
    >>> D = sketch.countsketch(8, 20, seed=0).to_dense()
    >>> set((D != 0).sum(axis=0).tolist()), sorted(set(D[D != 0].tolist()))
    ({1}, [-1.0, 1.0])
    """
    return _make("countsketch", m, n, seed, 1, scale)


def srht(m: int, n: int, *, seed: int | None = None, scale: bool = True) -> SketchOperator:
    """Subsampled randomized Hadamard transform √(n'/m)·R·H·D (n' = n rounded up to a power
    of two, H orthonormal, D random signs, R m distinct rows), restricted to n columns.
    Applied in O(n' log n') per vector; requires m ≤ n'.

    Parameters
    ----------
    m, n : int
        The operator's shape ``(m, n)``: it maps vectors of length ``n`` to length ``m``.
        Each in [1, 2**31).
    seed : int, optional
        In [0, 2**64); ``None`` draws a fresh seed. The same seed gives the same entries on
        any thread count and device.
    scale : bool, default True
        Multiply by √(n'/m) (``False``: R·H·D alone, with orthonormal rows).

    Returns
    -------
    SketchOperator

    Raises
    ------
    TypeError
        ``m``, ``n`` or ``seed`` is not an int.
    ValueError
        An extent or the seed out of range, or ``m`` larger than ``n`` rounded up to a power of two.

    Examples
    --------
    >>> import numpy as np
    >>> from sketchcore import sketch
    >>> S = sketch.srht(64, 1000, seed=0)
    >>> A = np.random.default_rng(1).standard_normal((1000, 4))
    >>> bool(np.allclose(S @ A, S.to_dense() @ A))
    True
    """
    return _make("srht", m, n, seed, 1, scale)


@overload
def jl_min_dim(n_samples: int, eps: float = 0.1) -> int: ...
@overload
def jl_min_dim(n_samples: npt.ArrayLike, eps: npt.ArrayLike = 0.1) -> npt.NDArray[np.int64]: ...


def jl_min_dim(n_samples: Any, eps: Any = 0.1) -> Any:
    """Smallest safe sketch dimension by the Johnson–Lindenstrauss lemma, with the same
    formula as scikit-learn's ``johnson_lindenstrauss_min_dim``:
    ``4·ln(n_samples) / (eps²/2 − eps³/3)``, rounded down. Scalars give an int; arrays
    (NumPy broadcasting) give an int64 array.

    Parameters
    ----------
    n_samples : int or array_like
        Number of points whose pairwise distances are to be kept (positive).
    eps : float or array_like, default 0.1
        The allowed relative distortion, in (0, 1).

    Returns
    -------
    int or numpy.ndarray of int64
        The sketch dimension for each (broadcast) pair of arguments.

    Raises
    ------
    ValueError
        ``eps`` outside (0, 1), or ``n_samples`` not positive numbers.

    Examples
    --------
    >>> from sketchcore import sketch
    >>> sketch.jl_min_dim(10_000, eps=0.1)
    7894
    >>> sketch.jl_min_dim([100, 1000], eps=0.5).tolist()
    [221, 331]
    """
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



