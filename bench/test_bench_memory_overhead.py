"""Pool memory at the headline shape, and the Python overhead of a tiny call."""
import numpy as np

import sketchcore
from conftest import BOUNDS


def _peak_of_call(batch, rng):
    x = rng.standard_normal((batch, 4096), dtype=np.float32)
    S = rng.standard_normal((4, 4096, 64), dtype=np.float32)
    U = rng.standard_normal((4, 64, 4096), dtype=np.float32)
    b = rng.standard_normal(4096, dtype=np.float32)
    sketchcore.sketched_matmul(x, S, U, bias=b, activation="relu")
    sketchcore.memory.reset_peak()
    base = sketchcore.memory.stats()["current_bytes"]
    sketchcore.sketched_matmul(x, S, U, bias=b, activation="relu")
    return sketchcore.memory.stats()["peak_bytes"] - base


def test_pool_peak_at_the_headline_shape(benchmark):
    """Target: ≤ 16 MiB of pool memory at (4096, 4096 → 4096, T 4 × k 64), and the same
    at twice the batch."""
    rng = np.random.default_rng(0)
    peak = benchmark.pedantic(lambda: _peak_of_call(4096, rng), rounds=1, iterations=1)
    peak_double = _peak_of_call(8192, rng)
    benchmark.extra_info.update({"peak_bytes_batch_4096": peak, "peak_bytes_batch_8192": peak_double})
    BOUNDS["pool peak, batch 4096 (MiB)"] = (peak / 2**20, 16, "MiB", "≤")
    BOUNDS["pool peak, batch 8192 minus batch 4096 (MiB)"] = ((peak_double - peak) / 2**20, 0, "MiB", "≤")


def test_tiny_call_overhead(benchmark):
    """Target: ≤ 10 µs for a whole call at batch 1, 64 → 64, T·k = 8."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 64), dtype=np.float32)
    S = rng.standard_normal((2, 64, 4), dtype=np.float32)
    U = rng.standard_normal((2, 4, 64), dtype=np.float32)
    benchmark.pedantic(lambda: sketchcore.sketched_matmul(x, S, U), rounds=2000, iterations=10, warmup_rounds=100)
    BOUNDS["tiny call (1, 64 → 64, T 2 × k 4), median (µs)"] = (benchmark.stats.stats.median * 1e6, 10, "µs", "≤")
