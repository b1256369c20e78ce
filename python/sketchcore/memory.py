"""Where sketchcore's temporaries come from: a caching host pool for the CPU, and for CUDA
devices a stream-ordered pool or the caller's framework allocator.

Freed blocks are cached and reused, so repeated calls make no system allocation. Output
arrays are not temporaries: they belong to the caller's framework.

>>> import numpy as np, sketchcore
>>> from sketchcore import memory
>>> x, S, U = np.ones((512, 256), np.float32), np.ones((4, 256, 8), np.float32), np.ones((4, 8, 64), np.float32)
>>> y = sketchcore.sketched_matmul(x, S, U)
>>> memory.stats()["current_bytes"]     # every temporary is back in the pool
0
"""
from __future__ import annotations

from typing import TypedDict

from sketchcore import _device_allocators, _memory

_device_allocator: object = "sketchcore"


class MemoryStats(TypedDict):
    """Counters of a memory pool, as :func:`stats` and :func:`device_stats` return them.

    Attributes
    ----------
    current_bytes : int
        Bytes in use by temporaries now.
    peak_bytes : int
        The most bytes in use since the last :func:`reset_peak` (or start).
    reserved_bytes : int
        Bytes held from the system: in use + cached.
    num_allocs : int
        Allocations made.
    num_cache_hits : int
        Allocations served from the cache.
    limit_bytes : int or None
        The cap set with :func:`set_limit`; ``None`` when unlimited.

    Examples
    --------
    >>> from sketchcore import memory
    >>> counters: memory.MemoryStats = memory.stats()
    >>> counters["reserved_bytes"] >= counters["current_bytes"]
    True
    """

    current_bytes: int
    peak_bytes: int
    reserved_bytes: int
    num_allocs: int
    num_cache_hits: int
    limit_bytes: int | None


def stats() -> MemoryStats:
    """Counters of the pool: ``current_bytes`` (in use), ``peak_bytes`` (most in use since
    the last :func:`reset_peak`), ``reserved_bytes`` (held from the system: in use + cached),
    ``num_allocs``, ``num_cache_hits`` (allocations served from the cache) and
    ``limit_bytes`` (``None`` when unlimited). Bytes count whole size classes.

    Returns
    -------
    MemoryStats
        A new dict; later calls do not change it.

    Examples
    --------
    >>> from sketchcore import memory
    >>> sorted(memory.stats())
    ['current_bytes', 'limit_bytes', 'num_allocs', 'num_cache_hits', 'peak_bytes', 'reserved_bytes']
    """
    return _memory.stats()


def reset_peak() -> None:
    """Sets ``peak_bytes`` to the bytes currently in use.

    Examples
    --------
    >>> from sketchcore import memory
    >>> memory.reset_peak()
    >>> memory.stats()["peak_bytes"] == memory.stats()["current_bytes"]
    True
    """
    _memory.reset_peak()


def empty_cache() -> None:
    """Returns every cached, unused block to the system.

    Blocks in use by a running call stay; the next calls allocate again (and cache again).

    Examples
    --------
    >>> from sketchcore import memory
    >>> memory.empty_cache()
    >>> memory.stats()["reserved_bytes"] == memory.stats()["current_bytes"]
    True
    """
    _memory.empty_cache()


def set_limit(nbytes: int | None) -> None:
    """Caps the memory the pool may hold (``reserved_bytes``) at ``nbytes``; ``None`` removes
    the cap. A call whose temporaries would exceed it first releases the cache, then raises
    ``MemoryError`` naming the limit; its temporaries are returned and the next call works.

    Parameters
    ----------
    nbytes : int or None
        The cap in bytes (≥ 1), or ``None`` for no cap.

    Raises
    ------
    TypeError
        ``nbytes`` is neither an int nor ``None``.
    ValueError
        ``nbytes`` below 1.

    Examples
    --------
    >>> import numpy as np, sketchcore
    >>> from sketchcore import memory
    >>> x, S, U = np.ones((4096, 512), np.float32), np.ones((512, 64), np.float32), np.ones((64, 512), np.float32)
    >>> memory.empty_cache()
    >>> memory.set_limit(1024)
    >>> try:
    ...     sketchcore.sketched_matmul(x, S, U)
    ... except MemoryError as error:
    ...     print("MemoryError")
    MemoryError
    >>> memory.set_limit(None)
    >>> sketchcore.sketched_matmul(x, S, U).shape
    (4096, 512)
    """
    _memory.set_limit(nbytes)


def set_device_allocator(allocator: object) -> None:
    """Chooses where the temporaries of CUDA calls come from:

    * ``"sketchcore"`` (the default): sketchcore's stream-ordered pool (``cudaMallocAsync``
      on a pool that keeps freed memory);
    * ``"torch"``: PyTorch's caching allocator, so that torch and sketchcore share one pool
      (the temporaries show in ``torch.cuda.memory_allocated``);
    * ``"cupy"``: CuPy's current memory pool;
    * any object with ``allocate(nbytes, device, stream) -> int`` (a device address, 256-byte
      aligned, usable in order on the CUDA stream handle ``stream``) and
      ``deallocate(address, nbytes, device, stream)``.

    A block always returns to the allocator it came from. A Python allocator is called with
    the GIL, once per temporary. When ``allocate`` raises, the sketchcore call raises
    ``MemoryError`` with the allocator's message; an exception in ``deallocate`` is reported
    as unraisable (the call goes on).

    Parameters
    ----------
    allocator : str or object
        ``"sketchcore"`` (or ``None``), ``"torch"``, ``"cupy"``, or an object with
        ``allocate`` and ``deallocate`` methods as above.

    Raises
    ------
    ValueError
        An unknown name, or a framework that is not usable here.
    TypeError
        An object without ``allocate`` and ``deallocate`` methods.

    Examples
    --------
    >>> from sketchcore import memory
    >>> memory.set_device_allocator("sketchcore")
    >>> memory.get_device_allocator()
    'sketchcore'
    >>> try:
    ...     memory.set_device_allocator("malloc")
    ... except ValueError as error:
    ...     print("ValueError")
    ValueError
    """
    if allocator is None or allocator == "sketchcore":
        _memory.set_device_allocator(None)
        chosen = "sketchcore"
    elif isinstance(allocator, str):
        if allocator not in _device_allocators.NAMED:
            raise ValueError(f"set_device_allocator: allocator: expected 'sketchcore', 'torch', 'cupy' or an object "
                             f"with allocate/deallocate, got {allocator!r}")
        _memory.set_device_allocator(_device_allocators.NAMED[allocator]())
        chosen = allocator
    else:
        missing = [m for m in ("allocate", "deallocate") if not callable(getattr(allocator, m, None))]
        if missing:
            raise TypeError(f"set_device_allocator: allocator: expected 'sketchcore', 'torch', 'cupy' or an object "
                            f"with allocate/deallocate methods, got {type(allocator).__name__} without "
                            f"{' and '.join(missing)}")
        _memory.set_device_allocator(allocator)
        chosen = allocator
    global _device_allocator
    _device_allocator = chosen


def get_device_allocator() -> object:
    """The current device allocator: ``"sketchcore"``, ``"torch"``, ``"cupy"`` or the object
    given to :func:`set_device_allocator`.

    Returns
    -------
    str or object

    Examples
    --------
    >>> from sketchcore import memory
    >>> memory.get_device_allocator()
    'sketchcore'
    """
    return _device_allocator


def device_stats(device: int = 0) -> MemoryStats:
    """Counters of the CUDA temporaries on device ``device``, with the keys of :func:`stats`:
    ``current_bytes``, ``peak_bytes`` and ``num_allocs`` count every temporary, whichever
    allocator it came from; ``reserved_bytes`` is what sketchcore's own pool holds from the
    driver; ``num_cache_hits`` is 0 (the driver's pool does not report them). All zero in a
    build without the CUDA backend or for a device sketchcore has not used.

    Parameters
    ----------
    device : int, default 0
        The CUDA device ordinal.

    Returns
    -------
    MemoryStats

    Raises
    ------
    ValueError
        A negative ``device``.

    Examples
    --------
    >>> from sketchcore import memory
    >>> stats = memory.device_stats(0)        # all zero without a GPU
    >>> stats["current_bytes"] >= 0
    True
    """
    return _memory.device_stats(device)


def device_reset_peak(device: int = 0) -> None:
    """Sets the device pool's ``peak_bytes`` to the bytes currently in use.

    Parameters
    ----------
    device : int, default 0
        The CUDA device ordinal (nothing to do in a build without the CUDA backend).

    Examples
    --------
    >>> from sketchcore import memory
    >>> memory.device_reset_peak(0)
    """
    _memory.device_reset_peak(device)


def device_empty_cache(device: int = 0) -> None:
    """Waits for the device's work, then returns the memory its pool caches to the driver.

    Parameters
    ----------
    device : int, default 0
        The CUDA device ordinal (nothing to do in a build without the CUDA backend).

    Examples
    --------
    >>> from sketchcore import memory
    >>> memory.device_empty_cache(0)
    """
    _memory.device_empty_cache(device)


__all__ = ["MemoryStats", "device_empty_cache", "device_reset_peak", "device_stats", "empty_cache", "get_device_allocator",
           "reset_peak", "set_device_allocator", "set_limit", "stats"]
