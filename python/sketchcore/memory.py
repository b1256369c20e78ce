"""sketchcore's host memory pool: where every CPU temporary of every operation comes from.

Freed blocks are cached per size class and reused, so repeated calls make no system
allocation. Output arrays are not temporaries: they belong to the caller's framework.
"""
from __future__ import annotations

from sketchcore import _memory


def stats() -> dict:
    """Counters of the pool: ``current_bytes`` (in use), ``peak_bytes`` (most in use since
    the last :func:`reset_peak`), ``reserved_bytes`` (held from the system: in use + cached),
    ``num_allocs``, ``num_cache_hits`` (allocations served from the cache) and
    ``limit_bytes`` (``None`` when unlimited). Bytes count whole size classes."""
    return _memory.stats()


def reset_peak() -> None:
    """Sets ``peak_bytes`` to the bytes currently in use."""
    _memory.reset_peak()


def empty_cache() -> None:
    """Returns every cached, unused block to the system."""
    _memory.empty_cache()


def set_limit(nbytes: int | None) -> None:
    """Caps the memory the pool may hold (``reserved_bytes``) at ``nbytes``; ``None`` removes
    the cap. A call whose temporaries would exceed it first releases the cache, then raises
    ``MemoryError`` naming the limit; its temporaries are returned and the next call works."""
    _memory.set_limit(nbytes)


def device_stats(device: int = 0) -> dict:
    """Counters of the stream-ordered pool that CUDA temporaries on device ``device`` come
    from, with the keys of :func:`stats` (``reserved_bytes`` is what the pool holds from the
    driver; ``num_cache_hits`` is 0, the driver's pool does not report them). All zero in a
    build without the CUDA backend or for a device sketchcore has not used."""
    return _memory.device_stats(device)


def device_reset_peak(device: int = 0) -> None:
    """Sets the device pool's ``peak_bytes`` to the bytes currently in use."""
    _memory.device_reset_peak(device)


def device_empty_cache(device: int = 0) -> None:
    """Waits for the device's work, then returns the memory its pool caches to the driver."""
    _memory.device_empty_cache(device)


__all__ = ["device_empty_cache", "device_reset_peak", "device_stats", "empty_cache", "reset_peak", "set_limit",
           "stats"]
