"""Routing CUDA temporaries to a framework's allocator (sketchcore.memory.set_device_allocator):
choice and validation of allocators, and the C++ → Python path that every CUDA temporary
takes when one is set, driven here without a device through the installed C++ resource.
tests/gpu/test_gpu.py runs real calls through the 'torch' and 'cupy' allocators."""
import importlib.util
import sys

import pytest

import sketchcore
from sketchcore import _memory

memory = sketchcore.memory


@pytest.fixture(autouse=True)
def default_allocator():
    memory.set_device_allocator("sketchcore")
    yield
    memory.set_device_allocator("sketchcore")


class Recorder:
    """Hands out fake addresses and records every call."""

    def __init__(self):
        self.calls, self.next = [], 1 << 20

    def allocate(self, nbytes, device, stream):
        self.calls.append(("allocate", nbytes, device, stream))
        self.next += 1 << 12
        return self.next

    def deallocate(self, address, nbytes, device, stream):
        self.calls.append(("deallocate", address, nbytes, device, stream))


def test_a_python_allocator_receives_every_argument_through_the_core():
    recorder = Recorder()
    memory.set_device_allocator(recorder)
    assert memory.get_device_allocator() is recorder
    address = _memory._device_allocate(1000, 3, 0xABC)
    _memory._device_deallocate(address, 1000, 3, 0xABC)
    assert recorder.calls == [("allocate", 1000, 3, 0xABC), ("deallocate", address, 1000, 3, 0xABC)]


@pytest.mark.parametrize(("returned", "fragment"), [
    (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), "RuntimeError: CUDA out of memory. Tried"),
    ("0x10", "TypeError: allocate returned str, expected an int address"),
    (0, "MemoryError: allocate returned the address 0"),
    (True, "TypeError: allocate returned bool"),
])
def test_a_failing_allocate_is_a_memory_error_naming_the_allocators_message(returned, fragment):
    class Failing(Recorder):
        def allocate(self, nbytes, device, stream):
            if isinstance(returned, Exception):
                raise returned
            return returned

    memory.set_device_allocator(Failing())
    with pytest.raises(MemoryError) as info:
        _memory._device_allocate(512, 1, 0)
    assert "could not provide 512 bytes on CUDA device 1" in str(info.value)
    assert fragment in str(info.value)


def test_a_failing_deallocate_is_reported_as_unraisable_and_the_call_goes_on(monkeypatch):
    class Failing(Recorder):
        def deallocate(self, address, nbytes, device, stream):
            raise ValueError("double free")

    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda info: seen.append(info.exc_value))
    memory.set_device_allocator(Failing())
    _memory._device_deallocate(4096, 8, 0, 0)
    assert len(seen) == 1 and isinstance(seen[0], ValueError) and "double free" in str(seen[0])


def test_the_default_is_sketchcores_pool_and_none_restores_it():
    assert memory.get_device_allocator() == "sketchcore"
    memory.set_device_allocator(Recorder())
    memory.set_device_allocator(None)
    assert memory.get_device_allocator() == "sketchcore"
    with pytest.raises(RuntimeError, match="no device allocator is set"):
        _memory._device_allocate(8, 0, 0)


def test_switching_sends_the_next_temporaries_to_the_new_allocator():
    first, second = Recorder(), Recorder()
    memory.set_device_allocator(first)
    _memory._device_allocate(64, 0, 0)
    memory.set_device_allocator(second)
    assert memory.get_device_allocator() is second
    _memory._device_allocate(32, 0, 0)
    assert first.calls == [("allocate", 64, 0, 0)] and second.calls == [("allocate", 32, 0, 0)]


@pytest.mark.parametrize(("allocator", "error", "fragment"), [
    ("jax", ValueError, "allocator: expected 'sketchcore', 'torch', 'cupy' or an object with allocate/deallocate, "
                        "got 'jax'"),
    (object(), TypeError, "got object without allocate and deallocate"),
    (type("OnlyAllocate", (), {"allocate": lambda self, n, d, s: 1})(), TypeError,
     "got OnlyAllocate without deallocate"),
    (type("NotCallable", (), {"allocate": 1, "deallocate": 2})(), TypeError, "without allocate and deallocate"),
])
def test_bad_allocators_are_refused_and_the_previous_one_stays(allocator, error, fragment):
    with pytest.raises(error) as info:
        memory.set_device_allocator(allocator)
    assert fragment in str(info.value)
    assert memory.get_device_allocator() == "sketchcore"


def test_framework_allocators_that_cannot_work_here_are_refused_clearly():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="'torch' needs PyTorch with CUDA and a device, got torch"):
            memory.set_device_allocator("torch")
    if importlib.util.find_spec("cupy") is None:
        with pytest.raises(ValueError, match="'cupy' needs CuPy, which is not installed"):
            memory.set_device_allocator("cupy")
    assert memory.get_device_allocator() == "sketchcore"
