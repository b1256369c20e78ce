"""sketched_matmul inside NumPy and torch pipelines, as users run them (issue 17).

Four sketched layers 1024×2048 → 2048 (T 4 × k 32, relu, float32), each followed by a NumPy
layernorm and a small NumPy GEMM (2048 × 64). Reported: the median time of a sketched call
inside the pipeline over the median of the same call alone, blocks of each alternated.
Target ≤ 1.15: NumPy's OpenBLAS threads keep spinning after NumPy's GEMM and take the cores
from sketchcore's next call (bench/results/cpu-pipeline-2026-11-22.txt, 2-core VM: 1.78–2.06×
by default, 1.18–1.25× when both OpenBLAS copies start with OPENBLAS_THREAD_TIMEOUT=4). Since
calls on NumPy arrays run their GEMMs in NumPy's own OpenBLAS (sketchcore.set_cpu_blas), there
is one pool. The torch test does the same for SKLinear between nn.Linear + GELU layers, and
the isolation test checks that the framework's BLAS costs nothing alone.
"""
import statistics
import time

import numpy as np
import pytest

import sketchcore
from conftest import BOUNDS

ROWS, WIDTH, TERMS, RANK, LAYERS = 1024, 2048, 4, 32, 4


def _layernorm(x):
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)


def test_sketched_call_inside_a_numpy_pipeline_vs_alone(benchmark):
    """Target: (median sketched call inside the pipeline) / (median call alone) ≤ 1.15."""
    rng = np.random.default_rng(0)
    factors = [((rng.standard_normal((TERMS, WIDTH, RANK)) / WIDTH ** 0.5).astype(np.float32),
                (rng.standard_normal((TERMS, RANK, WIDTH)) / RANK ** 0.5).astype(np.float32)) for _ in range(LAYERS)]
    head = rng.standard_normal((WIDTH, 64)).astype(np.float32)
    x0 = rng.standard_normal((ROWS, WIDTH)).astype(np.float32)
    inside, alone = [], []

    def pipeline():
        x = x0
        for S, U in factors:
            start = time.perf_counter()
            y = sketchcore.sketched_matmul(x, S, U, activation="relu")
            inside.append(time.perf_counter() - start)
            x = _layernorm(y)
            x @ head

    def isolated():
        S, U = factors[0]
        for _ in range(LAYERS):
            start = time.perf_counter()
            sketchcore.sketched_matmul(x0, S, U, activation="relu")
            alone.append(time.perf_counter() - start)

    def block_pair():
        for _ in range(5):
            pipeline()
        for _ in range(5):
            isolated()

    pipeline(), isolated()  # warm-up: pools, BLAS threads
    inside.clear(), alone.clear()
    benchmark.pedantic(block_pair, rounds=6, iterations=1)
    ratio = statistics.median(inside) / statistics.median(alone)
    benchmark.extra_info.update({"inside_median_s": statistics.median(inside), "alone_median_s": statistics.median(alone),
                                 "ratio": ratio})
    BOUNDS["sketched call inside a NumPy pipeline / alone (1024×2048→2048, T4×k32)"] = (ratio, 1.15, "×", "≤")


def _median_per_call(fn, calls=4, rounds=7):
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


def test_a_call_alone_with_the_framework_blas_vs_sketchcores_own(benchmark):
    """Target: no regression in isolation: time with sketchcore's own OpenBLAS / time with
    NumPy's (the default for NumPy arrays) ≥ 0.95, blocks alternated."""
    rng = np.random.default_rng(1)
    S = (rng.standard_normal((TERMS, WIDTH, RANK)) / WIDTH ** 0.5).astype(np.float32)
    U = (rng.standard_normal((TERMS, RANK, WIDTH)) / RANK ** 0.5).astype(np.float32)
    x = rng.standard_normal((ROWS, WIDTH)).astype(np.float32)
    call = lambda: sketchcore.sketched_matmul(x, S, U, activation="relu")  # noqa: E731
    framework, own = [], []

    def measure(mode, record):
        # After a switch the other library's threads are still spinning: one untimed call and
        # a pause first, so that each side is timed alone as the target means.
        sketchcore.set_cpu_blas(mode)
        call()
        time.sleep(0.2)
        record.append(_median_per_call(call))

    def block_pair():
        measure("framework", framework)
        measure("own", own)
        sketchcore.set_cpu_blas("framework")

    block_pair()
    framework.clear(), own.clear()
    benchmark.pedantic(block_pair, rounds=6, iterations=1)
    ratio = statistics.median(own) / statistics.median(framework)
    benchmark.extra_info.update({"framework_blas_median_s": statistics.median(framework),
                                 "own_blas_median_s": statistics.median(own), "ratio": ratio})
    BOUNDS["a call alone: own OpenBLAS / NumPy's OpenBLAS (1024×2048→2048, T4×k32)"] = (ratio, 0.95, "×", "≥")


def test_sklinear_inside_a_torch_pipeline_vs_alone(benchmark):
    """Target: (median SKLinear forward+backward inside a torch model alternating with
    nn.Linear + GELU) / (median alone) ≤ 1.15."""
    torch = pytest.importorskip("torch")
    from sketchcore.torch import SKLinear
    torch.manual_seed(0)
    layers = [SKLinear(WIDTH, WIDTH, TERMS, RANK) for _ in range(2)]
    dense = [torch.nn.Linear(WIDTH, WIDTH) for _ in range(2)]
    x0 = torch.randn(ROWS, WIDTH)
    inside, alone = [], []

    def timed(layer, x, record):
        start = time.perf_counter()
        y = layer(x)
        record.append(time.perf_counter() - start)
        return y

    def model():
        x = x0
        for sk, lin in zip(layers, dense):
            x = torch.nn.functional.gelu(lin(timed(sk, x, inside)))
        x.sum().backward()

    def isolated():
        for _ in range(2):
            timed(layers[0], x0, alone).sum().backward()

    def block_pair():
        for _ in range(3):
            model()
        for _ in range(3):
            isolated()

    model(), isolated()
    inside.clear(), alone.clear()
    benchmark.pedantic(block_pair, rounds=5, iterations=1)
    ratio = statistics.median(inside) / statistics.median(alone)
    benchmark.extra_info.update({"inside_median_s": statistics.median(inside), "alone_median_s": statistics.median(alone),
                                 "ratio": ratio})
    BOUNDS["SKLinear forward inside a torch model (nn.Linear + GELU between) / alone (1024×2048→2048, T4×k32)"] = (
        ratio, 1.15, "×", "≤")
