"""The host memory pool behind every CPU temporary: stats move as expected, the limit
raises MemoryError without leaking, and peak use does not grow with the batch."""
import threading

import numpy as np
import pytest

import sketchcore
from _reference import assert_close, random_problem, reference

KEYS = {"current_bytes", "peak_bytes", "reserved_bytes", "num_allocs", "num_cache_hits", "limit_bytes"}


@pytest.fixture(autouse=True)
def no_limit():
    sketchcore.memory.set_limit(None)
    yield
    sketchcore.memory.set_limit(None)


def test_stats_report_every_counter():
    s = sketchcore.memory.stats()
    assert set(s) == KEYS
    assert s["limit_bytes"] is None
    assert s["reserved_bytes"] >= s["current_bytes"] >= 0


def test_a_call_borrows_temporaries_and_returns_them(rng):
    x, S, U, _ = random_problem(rng, (300,), 64, 8, 40, terms=3, dtype=np.float32, bias=False)
    sketchcore.sketched_matmul(x, S, U)  # warm the cache
    before = sketchcore.memory.stats()
    sketchcore.memory.reset_peak()
    sketchcore.sketched_matmul(x, S, U)
    after = sketchcore.memory.stats()
    assert after["current_bytes"] == before["current_bytes"]  # everything returned
    assert after["num_allocs"] > before["num_allocs"]
    assert after["num_cache_hits"] - before["num_cache_hits"] == after["num_allocs"] - before["num_allocs"]
    # Z (300 × 24 floats) and the packed S (64 × 24) at least.
    assert after["peak_bytes"] - before["current_bytes"] >= 4 * (300 * 24 + 64 * 24)
    assert after["reserved_bytes"] == before["reserved_bytes"]  # served from the cache


def test_empty_cache_returns_unused_memory(rng):
    x, S, U, _ = random_problem(rng, (500,), 128, 16, 64, terms=2, dtype=np.float64, bias=False)
    sketchcore.sketched_matmul(x, S, U)
    assert sketchcore.memory.stats()["reserved_bytes"] > sketchcore.memory.stats()["current_bytes"]
    sketchcore.memory.empty_cache()
    s = sketchcore.memory.stats()
    assert s["reserved_bytes"] == s["current_bytes"]


def test_limit_raises_memory_error_leaks_nothing_and_the_next_call_works(rng):
    x, S, U, b = random_problem(rng, (2000,), 256, 32, 64, terms=4, dtype=np.float32)
    sketchcore.memory.empty_cache()
    baseline = sketchcore.memory.stats()["current_bytes"]
    sketchcore.memory.set_limit(64 * 1024)
    assert sketchcore.memory.stats()["limit_bytes"] == 64 * 1024
    with pytest.raises(MemoryError, match="would exceed the limit of 65536 bytes"):
        sketchcore.sketched_matmul(x, S, U, bias=b)
    assert sketchcore.memory.stats()["current_bytes"] == baseline
    with pytest.raises(MemoryError):  # still refused, still nothing leaked
        sketchcore.sketched_matmul(x, S, U, bias=b)
    assert sketchcore.memory.stats()["current_bytes"] == baseline
    sketchcore.memory.set_limit(None)
    assert_close(sketchcore.sketched_matmul(x, S, U, bias=b), reference(x, S, U, b), np.float32)
    assert sketchcore.memory.stats()["current_bytes"] == baseline


def test_a_limit_that_fits_lets_calls_through(rng):
    x, S, U, _ = random_problem(rng, (100,), 32, 4, 16, terms=2, dtype=np.float64, bias=False)
    sketchcore.memory.set_limit(16 << 20)
    assert_close(sketchcore.sketched_matmul(x, S, U), reference(x, S, U), np.float64)
    assert sketchcore.memory.stats()["reserved_bytes"] <= 16 << 20


def test_peak_does_not_grow_with_the_batch(rng):
    # r = 256 floats: chunks of 4096 rows, so batches of 8192 and 16384 borrow the same.
    peaks = []
    for batch in (8192, 16384):
        x, S, U, b = random_problem(rng, (batch,), 128, 64, 128, terms=4, dtype=np.float32)
        sketchcore.sketched_matmul(x, S, U, bias=b, activation="relu")
        sketchcore.memory.reset_peak()
        base = sketchcore.memory.stats()["current_bytes"]
        sketchcore.sketched_matmul(x, S, U, bias=b, activation="relu")
        peaks.append(sketchcore.memory.stats()["peak_bytes"] - base)
    assert peaks[0] == peaks[1]
    assert peaks[0] <= 16 << 20


@pytest.mark.parametrize("bad", [0, -5])
def test_set_limit_rejects_non_positive(bad):
    with pytest.raises(ValueError, match=f"nbytes: expected a positive number of bytes or None, got {bad}"):
        sketchcore.memory.set_limit(bad)


@pytest.mark.parametrize("bad", ["1MB", 1.5, True])
def test_set_limit_rejects_non_integers(bad):
    with pytest.raises(TypeError, match="nbytes: expected an int or None"):
        sketchcore.memory.set_limit(bad)


def test_concurrent_calls_return_every_block(rng):
    problems = [random_problem(rng, (int(rng.integers(50, 400)),), 64, 8, 32, terms=3, dtype=np.float64)
                for _ in range(6)]
    baseline = sketchcore.memory.stats()["current_bytes"]
    errors = []

    def worker(i):
        try:
            for _ in range(10):
                x, S, U, b = problems[i]
                assert_close(sketchcore.sketched_matmul(x, S, U, bias=b, dropout_p=0.0), reference(x, S, U, b),
                             np.float64)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sketchcore.memory.stats()["current_bytes"] == baseline
