"""CPU forward benchmarks of sketched_matmul against NumPy on the same float32 data.

Run: pytest bench --benchmark-only
Baselines: NumPy's (x @ S) @ U with S, U packed over terms (what a NumPy user writes),
and the dense layer x @ W it replaces. Each result is also checked for accuracy.
"""
import numpy as np
import pytest

import sketchcore

# (batch, d_in, d_out, T, k)
SHAPES = [
    (4096, 4096, 4096, 4, 64),
    (1024, 2048, 2048, 4, 32),
    (256, 1024, 1024, 8, 16),
    (32, 4096, 4096, 2, 128),
]


def group_name(shape):
    b, di, do, t, k = shape
    return f"{b}x{di}->{do} T{t}xk{k}"


def rounds_for(shape):
    b, di, do, t, k = shape
    flops = 2 * b * di * t * k + 2 * b * t * k * do
    return 15 if flops > 5e9 else 30


@pytest.fixture(scope="module", params=SHAPES, ids=group_name)
def problem(request):
    b, di, do, t, k = request.param
    rng = np.random.default_rng(20261121)
    x = rng.standard_normal((b, di), dtype=np.float32)
    S = rng.standard_normal((t, di, k), dtype=np.float32) / np.float32(np.sqrt(k))
    U = rng.standard_normal((t, k, do), dtype=np.float32) / np.float32(np.sqrt(di))
    S_packed = np.ascontiguousarray(S.transpose(1, 0, 2).reshape(di, t * k))
    U_packed = U.reshape(t * k, do)
    reference = (x.astype(np.float64) @ S_packed.astype(np.float64)) @ U_packed.astype(np.float64)
    return request.param, x, S, U, S_packed, U_packed, reference


def check(y, reference):
    err = np.linalg.norm(y.astype(np.float64) - reference) / np.linalg.norm(reference)
    assert err < 1e-5, f"relative error {err:.2e}"


def test_sketchcore(problem, record):
    shape, x, S, U, _, _, reference = problem
    y = record(group_name(shape), "sketchcore", lambda: sketchcore.sketched_matmul(x, S, U), rounds_for(shape))
    check(y, reference)


def test_sketchcore_into_out(problem, record):
    shape, x, S, U, _, _, reference = problem
    out = np.empty(reference.shape, np.float32)
    record(group_name(shape), "sketchcore out=", lambda: sketchcore.sketched_matmul(x, S, U, out=out),
           rounds_for(shape))
    check(out, reference)


def test_numpy_sketched(problem, record):
    shape, x, _, _, S_packed, U_packed, reference = problem
    y = record(group_name(shape), "numpy (x@S)@U", lambda: (x @ S_packed) @ U_packed, rounds_for(shape))
    check(y, reference)


def test_numpy_dense(problem, record):
    shape, x, *_ = problem
    b, di, do, t, k = shape
    W = np.random.default_rng(1).standard_normal((di, do), dtype=np.float32)
    y = record(group_name(shape), "numpy dense x@W", lambda: x @ W, rounds_for(shape))
    assert y.shape == (b, do)


def test_paired_sketchcore_vs_numpy(problem, paired):
    """The issue's target at the headline shape, and the same comparison at the others."""
    shape, x, S, U, S_packed, U_packed, _ = problem
    paired(group_name(shape), "sketchcore", "numpy (x@S)@U", lambda: sketchcore.sketched_matmul(x, S, U),
           lambda: (x @ S_packed) @ U_packed, pairs=31)
