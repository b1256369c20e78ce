"""Measuring instruments shared by the benchmarks: the peak memory of one call or of a phase
(resident set on the CPU, torch's allocator and sketchcore's pool on a GPU), a static KV cache
across transformers versions, and a split of a call's time by module kind (bench/llm_speed.py,
bench/lm_compression.py, bench/test_bench_attention.py, bench/test_bench_performer.py)."""
from __future__ import annotations

import ctypes
import gc
import re
import time
from pathlib import Path
from typing import Any, Callable

import torch

import sketchcore.memory


def rss_kib(field: str) -> int:
    """A field of /proc/self/status in KiB (0 where there is none)."""
    match = re.search(rf"{field}:\s+(\d+) kB", Path("/proc/self/status").read_text())
    return int(match.group(1)) if match else 0


class ResidentPeak:
    """Resident-set growth (MiB) between ``start()`` and ``peak()``, Linux only (else NaN)."""

    def start(self) -> None:
        gc.collect()
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current resident set
            self.base = rss_kib("VmRSS")
        except OSError:
            self.base = -1

    def peak(self) -> float:
        return (rss_kib("VmHWM") - self.base) / 1024 if self.base >= 0 else float("nan")


def is_dense_linear(module: torch.nn.Module) -> bool:
    """An ``nn.Linear`` or torch's dynamically quantized one (``quantize_dynamic``)."""
    return type(module) is torch.nn.Linear or isinstance(module, torch.ao.nn.quantized.dynamic.Linear)


def model_bytes(model: torch.nn.Module) -> int:
    """Bytes a model holds: its parameters and buffers, and the packed int8 weights (and biases) of
    torch's dynamically quantized layers, which are neither."""
    held = {id(t): t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()]}
    packed = 0  # unpacked afresh on each call: counted as they come (their ids are reused once freed)
    for module in model.modules():
        if isinstance(module, torch.ao.nn.quantized.dynamic.Linear):
            packed += sum(t.numel() * t.element_size() for t in module._weight_bias() if t is not None)
    return sum(held.values()) + packed


def embedding_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's embedding tables (a decode step reads one row of each per token)."""
    return sum(m.weight.numel() * m.weight.element_size() for m in model.modules()
               if isinstance(m, torch.nn.Embedding))


class PeakMemory:
    """Peak memory (MiB) of a phase, the model's parameters and buffers included. On a GPU: the most torch's
    allocator held plus the most sketchcore's device pool held (zero when temporaries go through
    torch); on the CPU: the resident-set growth during the phase plus the parameters' and buffers' bytes."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.resident = ResidentPeak()

    def start(self, model: torch.nn.Module) -> None:
        self.weights = model_bytes(model) / 2**20  # an SKLinear's fixed sketches are buffers
        if self.device.type == "cuda":
            gc.collect()
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
            sketchcore.memory.device_reset_peak(self.device.index or 0)
        else:
            self.resident.start()

    def peak(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            pool = sketchcore.memory.device_stats(self.device.index or 0)["peak_bytes"]
            return (torch.cuda.max_memory_allocated(self.device) + pool) / 2**20
        return self.resident.peak() + self.weights


def peak_bytes(fn: Callable[[], Any], device: str) -> int:
    """Peak memory one call of `fn` adds: on a GPU what torch's allocator and sketchcore's pool held
    above what they held before; on the CPU the resident set's high-water mark above the resident
    set before (Linux)."""
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        sketchcore.memory.device_reset_peak(0)
        before, pool = torch.cuda.memory_allocated(), sketchcore.memory.device_stats(0)["current_bytes"]
        fn()
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - before) + (sketchcore.memory.device_stats(0)["peak_bytes"] - pool)
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current resident set
    before = rss_kib("VmRSS")
    fn()
    return (rss_kib("VmHWM") - before) * 1024


def static_cache(model: torch.nn.Module, batch: int, length: int, device: torch.device) -> Any:
    """A transformers StaticCache for `batch` sequences of up to `length` tokens: transformers 5
    sizes it on first use; 4.x takes the batch, device and dtype up front."""
    from transformers import StaticCache
    try:
        return StaticCache(config=model.config, max_cache_len=length)
    except TypeError:
        dtype = next(model.parameters()).dtype
        return StaticCache(config=model.config, max_batch_size=batch, max_cache_len=length, device=device,
                           dtype=dtype)


class ModuleSplit:
    """Splits a call's time between the sketched layers (`sketched` types), the remaining dense
    ``nn.Linear`` layers and everything else, with forward (and, for a training step, full
    backward) hooks on those leaf modules that time each call — synchronising the GPU at every
    hook, so the split is run apart from the timed measurements. Also counts the sketched calls:
    proof that the compressed layers actually ran."""

    def __init__(self, model: torch.nn.Module, device: torch.device, sketched: tuple[type, ...]) -> None:
        self.device = device
        self.handles: list[Any] = []
        self.totals = {"sketched": 0.0, "dense_linear": 0.0}
        self.calls = 0
        self.started: dict[int, float] = {}
        self.recording = False
        for module in model.modules():
            kind = "sketched" if isinstance(module, sketched) else ("dense_linear" if is_dense_linear(module) else None)
            if kind is None:
                continue
            self.handles.append(module.register_forward_pre_hook(self._begin))
            self.handles.append(module.register_forward_hook(self._ender(kind, count=kind == "sketched")))
            self.handles.append(module.register_full_backward_pre_hook(self._begin_backward))
            self.handles.append(module.register_full_backward_hook(self._ender_backward(kind)))

    def _now(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def _begin(self, module: torch.nn.Module, args: Any) -> None:
        if self.recording:
            self.started[id(module)] = self._now()

    def _begin_backward(self, module: torch.nn.Module, grad_output: Any) -> None:
        self._begin(module, grad_output)

    def _ender(self, kind: str, count: bool) -> Callable[..., None]:
        def end(module: torch.nn.Module, args: Any, output: Any) -> None:
            if self.recording and id(module) in self.started:
                self.totals[kind] += self._now() - self.started.pop(id(module))
                self.calls += count
        return end

    def _ender_backward(self, kind: str) -> Callable[..., None]:
        def end(module: torch.nn.Module, grad_input: Any, grad_output: Any) -> None:
            if self.recording and id(module) in self.started:
                self.totals[kind] += self._now() - self.started.pop(id(module))
        return end

    def measure(self, fn: Callable[[], Any], setup: Callable[[], Any] | None = None) -> dict[str, Any]:
        """Runs `fn` once to warm up, then once recorded: milliseconds in the sketched layers, the
        dense linear layers and the rest, and the number of sketched calls. `setup` runs before
        each call of `fn`, unrecorded (a decode's prefill)."""
        prepare = setup or (lambda: None)
        prepare()
        fn()  # warm-up
        prepare()
        return self._record(fn)

    def _record(self, fn: Callable[[], Any]) -> dict[str, Any]:
        self.totals = {"sketched": 0.0, "dense_linear": 0.0}
        self.calls = 0
        self.started.clear()
        self.recording = True
        start = self._now()
        try:
            fn()
        finally:
            total = self._now() - start
            self.recording = False
        return {"sketched_ms": self.totals["sketched"] * 1e3, "dense_linear_ms": self.totals["dense_linear"] * 1e3,
                "rest_ms": (total - sum(self.totals.values())) * 1e3, "sketched_calls": self.calls}

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def balanced_orders(n: int) -> list[list[int]]:
    """Orders of n items in which every item comes right after every other one equally often
    (Williams' balanced Latin square: n orders for even n, 2n for odd n), and first and last
    equally often. A rotated order would put each item after the same one in every round."""
    first, low, high = [0], 1, n - 1
    while len(first) < n:
        first.append(low)
        low += 1
        if len(first) < n:
            first.append(high)
            high -= 1
    orders = [[(item + shift) % n for item in first] for shift in range(n)]
    return orders if n % 2 == 0 else orders + [order[::-1] for order in orders]
