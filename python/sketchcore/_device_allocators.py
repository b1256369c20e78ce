"""Device allocators that route sketchcore's CUDA temporaries to a framework's pool, so
that one pool serves both (see sketchcore.memory.set_device_allocator)."""
from __future__ import annotations

import threading


class TorchAllocator:
    """PyTorch's caching allocator (torch.cuda.caching_allocator_alloc): the temporaries
    count in torch.cuda.memory_allocated and reuse torch's cached blocks on the same stream."""

    name = "torch"

    def __init__(self):
        try:
            import torch
        except ImportError as e:
            raise ValueError("set_device_allocator: allocator: 'torch' needs PyTorch, which is not installed") from e
        if not torch.cuda.is_available():
            raise ValueError(f"set_device_allocator: allocator: 'torch' needs PyTorch with CUDA and a device, "
                             f"got torch {torch.__version__} without one")
        self._cuda = torch.cuda

    def allocate(self, nbytes: int, device: int, stream: int) -> int:
        return self._cuda.caching_allocator_alloc(nbytes, device, stream)

    def deallocate(self, address: int, nbytes: int, device: int, stream: int) -> None:
        self._cuda.caching_allocator_delete(address)


class CupyAllocator:
    """CuPy's current memory pool (cupy.cuda.alloc on the call's device and stream); the
    blocks are kept alive here until sketchcore returns them."""

    name = "cupy"

    def __init__(self):
        try:
            import cupy
        except ImportError as e:
            raise ValueError("set_device_allocator: allocator: 'cupy' needs CuPy, which is not installed") from e
        self._cupy = cupy
        self._blocks = {}
        self._lock = threading.Lock()

    def allocate(self, nbytes: int, device: int, stream: int) -> int:
        cuda = self._cupy.cuda
        on_stream = cuda.Stream.null if stream == 0 else cuda.ExternalStream(stream, device)
        with cuda.Device(device), on_stream:
            memory = cuda.alloc(nbytes)
        with self._lock:
            self._blocks[memory.ptr] = memory
        return memory.ptr

    def deallocate(self, address: int, nbytes: int, device: int, stream: int) -> None:
        with self._lock:
            self._blocks.pop(address)  # CuPy's pool takes the block back


NAMED = {"torch": TorchAllocator, "cupy": CupyAllocator}
