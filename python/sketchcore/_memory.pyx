# cython: language_level=3
"""Bindings of the default host memory pool (see sketchcore.memory)."""
from libcpp.optional cimport nullopt, optional
from libcpp.string cimport string

from sketchcore cimport _sketchcore as core
from sketchcore._sketchcore cimport MemoryStats


cdef dict _as_dict(MemoryStats s):
    return {
        "current_bytes": s.current_bytes,
        "peak_bytes": s.peak_bytes,
        "reserved_bytes": s.reserved_bytes,
        "num_allocs": s.num_allocs,
        "num_cache_hits": s.num_cache_hits,
        "limit_bytes": s.limit_bytes if s.limit_bytes else None,
    }


def stats():
    return _as_dict(core.default_host_pool().stats())


def _device_ordinal(device):
    if isinstance(device, bool) or not hasattr(device, "__index__"):
        raise TypeError(f"device: expected a CUDA device ordinal (int), got {type(device).__name__}")
    return device.__index__()


def device_stats(device):
    return _as_dict(core.device_memory_stats(_device_ordinal(device)))


def device_reset_peak(device):
    core.device_reset_peak(_device_ordinal(device))


def device_empty_cache(device):
    core.device_empty_cache(_device_ordinal(device))


def reset_peak():
    core.default_host_pool().reset_peak()


def empty_cache():
    core.default_host_pool().empty_cache()


def set_limit(nbytes):
    cdef optional[size_t] limit = nullopt
    if nbytes is None:
        core.default_host_pool().set_limit(limit)
        return
    if isinstance(nbytes, bool) or not hasattr(nbytes, "__index__"):
        raise TypeError(f"set_limit: nbytes: expected an int or None, got {type(nbytes).__name__}")
    nbytes = nbytes.__index__()
    if nbytes <= 0:
        raise ValueError(f"set_limit: nbytes: expected a positive number of bytes or None, got {nbytes}")
    if nbytes >= 2**64:
        raise ValueError(f"set_limit: nbytes: expected a number of bytes below 2**64, got {nbytes}")
    limit = <size_t>nbytes
    core.default_host_pool().set_limit(limit)


# ------------------------------------------------------------ device allocators
# A Python allocator object is called from the C++ core (which runs without the GIL) by
# the two callbacks below. Every allocator ever installed stays referenced here: a call on
# another thread may still return a block to the one it came from.
from libc.stdint cimport uintptr_t

_installed_allocators = []


cdef void* _allocate_callback(void* owner, size_t nbytes, int device, uintptr_t stream,
                              string* error) noexcept with gil:
    try:
        address = (<object>owner).allocate(nbytes, device, stream)
        if isinstance(address, bool) or not hasattr(address, "__index__"):
            raise TypeError(f"allocate returned {type(address).__name__}, expected an int address")
        address = address.__index__()
        if address <= 0:
            raise MemoryError(f"allocate returned the address {address}")
        return <void*><uintptr_t>address
    except BaseException as e:
        error[0] = f"{type(e).__name__}: {e}".encode("utf-8", "replace")
        return NULL


cdef void _deallocate_callback(void* owner, void* block, size_t nbytes, int device,
                               uintptr_t stream) noexcept with gil:
    # An exception cannot propagate into the C++ core: Cython reports it as unraisable.
    (<object>owner).deallocate(<uintptr_t>block, nbytes, device, stream)


def set_device_allocator(allocator):
    """Installs `allocator` (an object with allocate/deallocate) or, for None, the pool."""
    if allocator is None:
        core.set_callback_device_resource(NULL, _allocate_callback, _deallocate_callback)
        return
    _installed_allocators.append(allocator)
    core.set_callback_device_resource(<void*>allocator, _allocate_callback, _deallocate_callback)


def _device_allocate(size_t nbytes, int device, uintptr_t stream):
    """Calls the installed allocator through the C++ resource (for tests)."""
    return core.device_resource_allocate(nbytes, device, stream)


def _device_deallocate(uintptr_t block, size_t nbytes, int device, uintptr_t stream):
    core.device_resource_deallocate(block, nbytes, device, stream)
