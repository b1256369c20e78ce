"""Gated paths: code that has not yet passed its tests on a GPU runs only when opted into.

The registry lives in the C++ core (``<sketchcore/gated_paths.hpp>``), which the CUDA backend
consults on every call; these functions read and set it. ``SKETCHCORE_CUDA_UNVERIFIED=1`` in the
environment (read once, at the first query) opens every gated path, a comma-separated list of
names opens those; :func:`set_gated_path` and :func:`gated_path` override it from a program.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, NamedTuple, Optional

from sketchcore import _runtime

#: The environment variable that opens gated paths.
UNVERIFIED_VARIABLE = "SKETCHCORE_CUDA_UNVERIFIED"


class GatedPath(NamedTuple):
    """One gated path, as :func:`gated_paths` reports it: ``name``, ``description``,
    ``enabled``, ``overridden`` (the fields' own entries say what each holds)."""

    name: str
    description: str
    enabled: bool
    overridden: bool


# The fields' documentation (a NamedTuple's fields are properties; an Attributes section would
# describe them a second time).
GatedPath.name.__doc__ = "str: its name in ``SKETCHCORE_CUDA_UNVERIFIED`` and in :func:`set_gated_path`."
GatedPath.description.__doc__ = "str: what the path is, and what runs while it is closed."
GatedPath.enabled.__doc__ = "bool: whether calls take it now."
GatedPath.overridden.__doc__ = "bool: whether a program's :func:`set_gated_path` (not the environment) decides it."


def gated_paths() -> list[GatedPath]:
    """Every code path that has not yet passed its tests on a GPU, and whether it is enabled.

    Returns
    -------
    list of GatedPath
        In the core's order: ``cuda_padded_inner_width`` (padded ranks in CUDA GEMMs),
        ``cuda_performer_kernels`` (the fused Performer CUDA kernels), ``jax_cuda_handlers``
        (sketchcore.jax on CUDA GPUs), ``cuda_inner_activation`` (sketched_matmul's inner
        activation on CUDA), ``cuda_int8_factors`` (int8_sketched_matmul on CUDA),
        ``cuda_fp8_factors`` (fp8_sketched_matmul, CUDA only).

    Raises
    ------
    ValueError
        ``SKETCHCORE_CUDA_UNVERIFIED`` holds something other than 0, 1, all, none or a
        comma-separated list of these names.

    Examples
    --------
    >>> [p.name for p in gated_paths()]
    ['cuda_padded_inner_width', 'cuda_performer_kernels', 'jax_cuda_handlers', 'cuda_inner_activation', 'cuda_int8_factors', 'cuda_fp8_factors']
    """
    return [GatedPath(*entry) for entry in _runtime._gated_paths()]


def gated_path_enabled(name: str) -> bool:
    """Whether calls take the gated path `name` now (a program's override, else the environment).

    Parameters
    ----------
    name : str
        A name from :func:`gated_paths`.

    Returns
    -------
    bool

    Raises
    ------
    ValueError
        An unknown name (the message lists the known ones), or a malformed
        ``SKETCHCORE_CUDA_UNVERIFIED``.
    TypeError
        ``name`` is not a str.

    Examples
    --------
    >>> with gated_path("cuda_padded_inner_width", False):
    ...     gated_path_enabled("cuda_padded_inner_width")
    False
    """
    return _runtime._gated_path_enabled(name)


def set_gated_path(name: str, enabled: Optional[bool]) -> None:
    """Opens (True) or closes (False) the gated path `name` for this process, whatever the
    environment says; None returns it to the environment's setting. Calls that start
    afterwards follow it, on every thread.

    Parameters
    ----------
    name : str
        A name from :func:`gated_paths`.
    enabled : bool or None

    Returns
    -------
    None

    Raises
    ------
    ValueError
        An unknown name.
    TypeError
        ``name`` is not a str, or ``enabled`` is not a bool or None.

    Examples
    --------
    >>> set_gated_path("cuda_performer_kernels", True)
    >>> gated_path_enabled("cuda_performer_kernels")
    True
    >>> set_gated_path("cuda_performer_kernels", None)   # back to SKETCHCORE_CUDA_UNVERIFIED
    """
    if enabled is not None and not isinstance(enabled, bool):
        raise TypeError(f"set_gated_path: enabled: expected True, False or None, got {type(enabled).__name__}")
    _runtime._set_gated_path(name, enabled)


@contextlib.contextmanager
def gated_path(name: str, enabled: bool = True) -> Iterator[None]:
    """Opens (or closes) the gated path `name` inside a ``with`` block, then restores the
    override there was before. Process-wide, not per thread: meant for tests and scripts.

    Parameters
    ----------
    name : str
        A name from :func:`gated_paths`.
    enabled : bool, default True

    Yields
    ------
    None

    Raises
    ------
    ValueError, TypeError
        As :func:`set_gated_path`.

    Examples
    --------
    >>> with gated_path("cuda_padded_inner_width"):
    ...     cuda_inner_width(375, "bfloat16")
    376
    """
    if not isinstance(enabled, bool):
        raise TypeError(f"gated_path: enabled: expected a bool, got {type(enabled).__name__}")
    previous = _runtime._gated_path_override(name)
    _runtime._set_gated_path(name, enabled)
    try:
        yield
    finally:
        _runtime._set_gated_path(name, previous)


_DTYPE_NAMES = ("float16", "bfloat16", "float32", "float64")


def cuda_inner_width(rank: int, dtype: Any) -> int:
    """The per-term inner width the CUDA backend's GEMMs use for a sketched GEMM of rank
    `rank` in `dtype`: `rank` itself, unless the gated path ``cuda_padded_inner_width`` is
    enabled and `rank` elements are not a multiple of 16 bytes (float64 never pads); then the
    next width that is. The CUDA backend calls the same function, so this is the choice a call
    would make (checkable without a GPU).

    Parameters
    ----------
    rank : int
        ≥ 0, the rank k of each term.
    dtype : str or a NumPy/torch dtype
        float16, bfloat16, float32 or float64.

    Returns
    -------
    int

    Raises
    ------
    TypeError
        ``rank`` is not an int.
    ValueError
        ``rank`` < 0, or another dtype.

    Examples
    --------
    >>> with gated_path("cuda_padded_inner_width", False):
    ...     cuda_inner_width(375, "bfloat16")
    375
    """
    if isinstance(rank, bool) or not hasattr(rank, "__index__"):
        raise TypeError(f"cuda_inner_width: rank: expected an int, got {type(rank).__name__}")
    name = str(dtype).removeprefix("torch.")
    if name not in _DTYPE_NAMES:
        raise ValueError(f"cuda_inner_width: dtype: expected one of {', '.join(_DTYPE_NAMES)}, got {dtype!r}")
    return _runtime._cuda_inner_width(rank.__index__(), name)


def require_gated_path(name: str, operation: str) -> None:
    """Raises RuntimeError for `operation` (naming the path and how to open it) unless the
    gated path `name` is enabled; the Python adapters' counterpart of the core's check."""
    _runtime._require_gated_path(name, operation)
