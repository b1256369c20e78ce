"""The operator class behind :mod:`sketchcore.sketch` (its constructors live there): shape,
transpose, ``@`` from either side, dense blocks. Kept apart so that each file has one purpose;
``SketchOperator.__module__`` is ``sketchcore.sketch``, where users, docs and pickles find it."""
from __future__ import annotations

from numbers import Integral
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from sketchcore import _framework, _sketch

if TYPE_CHECKING:
    import numpy.typing as npt

# Results are arrays of the operand's framework and dtype: NumPy in, NumPy out; torch in, torch out.
ArrayT = TypeVar("ArrayT")


class SketchOperator:
    """A sketching operator of shape ``(m, n)`` (``(n, m)`` for its transpose ``.T``).

    ``S @ A`` applies it on the left (``A`` of shape ``(n, p)`` or ``(..., n, p)``, or a
    vector ``(n,)``), ``A @ S`` on the right (``A`` of shape ``(..., p, m)``); the result is
    an array of ``A``'s framework and dtype (float32 or float64). Sparse and SRHT operators
    are never formed; dense ones are generated tile by tile into pooled memory.

    Build one with :func:`gaussian`, :func:`rademacher`, :func:`uniform`, :func:`sparse_sign`,
    :func:`countsketch` or :func:`srht` rather than with the constructor.

    Parameters
    ----------
    kind : {"gaussian", "rademacher", "uniform", "sparse_sign", "countsketch", "srht"}
        The distribution of the entries.
    m, n : int
        The shape, each in [1, 2**31).
    seed : int
        In [0, 2**64): with the other arguments, determines every entry.
    nnz : int, default 1
        Nonzeros per column of a sparse sign operator, in [1, m].
    scale : bool, default True
        Scale so that ``E[S.T @ S] = I``.
    transposed : bool, default False
        Whether this is the transpose of the ``(m, n)`` operator (see :attr:`T`).

    Raises
    ------
    ValueError
        An unknown ``kind``, an extent, seed or ``nnz`` out of range, or an SRHT with ``m``
        larger than ``n`` rounded up to a power of two.

    Examples
    --------
    >>> import numpy as np
    >>> from sketchcore import sketch
    >>> S = sketch.gaussian(3, 5, seed=1)
    >>> S
    sketchcore.sketch.gaussian(3, 5, seed=1, scale=True)
    >>> S.shape, S.T.shape
    ((3, 5), (5, 3))
    >>> (S @ np.ones((5, 2))).shape, (np.ones((4, 3)) @ S).shape
    ((3, 2), (4, 5))
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
        """``(m, n)``, or ``(n, m)`` for a transposed operator.

        Examples
        --------
        >>> from sketchcore import sketch
        >>> sketch.srht(8, 100, seed=0).T.shape
        (100, 8)
        """
        return (self.n, self.m) if self.transposed else (self.m, self.n)

    @property
    def T(self) -> SketchOperator:  # noqa: N802 - the usual name of a transpose
        """The transposed operator (same entries, no copy).

        Examples
        --------
        >>> import numpy as np
        >>> from sketchcore import sketch
        >>> S = sketch.rademacher(4, 6, seed=0)
        >>> bool(np.array_equal(S.T.to_dense(), S.to_dense().T))
        True
        """
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
        else NumPy. ``dtype`` defaults to ``like``'s dtype, else float64.

        Parameters
        ----------
        dtype : dtype, optional
            float16, bfloat16, float32 or float64 (of ``like``'s framework when given).
        like : array, optional
            Any DLPack array (NumPy, torch, CuPy, ...): the result is of its framework and on
            its device, CUDA included (the same bits as on the CPU).

        Returns
        -------
        array, shape ``self.shape``
            A new array of ``like``'s framework (NumPy without ``like``).

        Raises
        ------
        TypeError
            ``like`` is not an array, or ``dtype`` is not a floating-point type.

        Examples
        --------
        >>> import numpy as np
        >>> from sketchcore import sketch
        >>> D = sketch.rademacher(4, 8, seed=2).to_dense(np.float32)
        >>> D.shape, D.dtype, sorted(set(np.abs(D).ravel().tolist()))
        ((4, 8), dtype('float32'), [0.5])
        """
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
        dimension, as NumPy indexing does (``S.block(3, slice(None))`` is row 3, 1-D).

        Parameters
        ----------
        rows, cols : slice or int
            Unit-step slices (negative bounds count from the end) or indices.
        dtype : dtype, optional
            float32 or float64 (the default).

        Returns
        -------
        numpy.ndarray
            The block: 2-D, or 1-D / 0-D where an index is an int.

        Raises
        ------
        ValueError
            A slice with a step other than 1.
        TypeError
            An index that is neither a slice nor an int.
        IndexError
            An int index outside the operator.

        Examples
        --------
        >>> import numpy as np
        >>> from sketchcore import sketch
        >>> S = sketch.gaussian(100, 50, seed=7)
        >>> bool(np.array_equal(S.block(slice(10, 20), slice(None)), S.to_dense()[10:20]))
        True
        >>> S.block(3, slice(0, 5)).shape
        (5,)
        """
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
        """``self @ A`` (side="left") or ``A @ self`` (side="right"), into ``out`` if given.

        Parameters
        ----------
        A : array
            float32 or float64 (16-bit types on CUDA devices too), of shape ``(n, p)``,
            ``(..., n, p)`` or ``(n,)`` for a left application (``(..., p, m)`` for a right
            one), from any DLPack producer; leading dimensions are a batch.
        side : {"left", "right"}
            Which side the operator is applied on.
        out : array, optional
            Written in place and returned: the result's shape, ``A``'s dtype and device.

        Returns
        -------
        array
            ``out`` if given, else a new array of ``A``'s framework, dtype and device.

        Raises
        ------
        ValueError
            An unknown ``side``, or shapes that do not fit the operator (the message names
            the expected shape).
        TypeError
            ``A`` is not an array or not of a floating-point dtype.

        Examples
        --------
        >>> import numpy as np
        >>> from sketchcore import sketch
        >>> S = sketch.sparse_sign(16, 64, 4, seed=0)
        >>> A = np.random.default_rng(0).standard_normal((64, 3))
        >>> bool(np.allclose(S.apply(A), S.to_dense() @ A))
        True
        >>> S.apply(np.ones((2, 16)), side="right").shape
        (2, 64)
        """
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


SketchOperator.__module__ = "sketchcore.sketch"
