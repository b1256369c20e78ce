"""Sketching operators: structured application (SRHT, sparse sign) against the dense
Gaussian, against scikit-learn's random projections, and generation throughput.

Run: pytest bench --benchmark-only -k sketch
"""

import numpy as np
import pytest

from conftest import INFO
from sketchcore import sketch

M, P = 256, 64  # sketch dimension and number of columns sketched


@pytest.mark.parametrize("log_n", [12, 13, 14, 15, 16])
@pytest.mark.parametrize("kind", ["srht", "sparse_sign"])
def test_structured_apply_vs_dense_gaussian(kind, log_n, paired):
    """No target: what the O(n log n) SRHT and the O(nnz·n) sparse sign (nnz = 8) save
    against generating and multiplying a dense Gaussian (float32, S (256, n), A (n, 64))."""
    n = 2**log_n
    A = np.random.default_rng(log_n).standard_normal((n, P), dtype=np.float32)
    gaussian = sketch.gaussian(M, n, seed=1)
    op = sketch.srht(M, n, seed=1) if kind == "srht" else sketch.sparse_sign(M, n, 8, seed=1)
    ref = op.to_dense("float64") @ A.astype(np.float64)
    assert np.linalg.norm(op @ A - ref) <= 1e-5 * np.linalg.norm(ref)
    paired(f"sketch n=2^{log_n}", f"{kind} @ A", "gaussian @ A", lambda: op @ A, lambda: gaussian @ A, pairs=5, calls=3)


N_SAMPLES, N_FEATURES, COMPONENTS = 2000, 8192, 512


@pytest.fixture(scope="module")
def projection_data():
    return np.random.default_rng(0).standard_normal((N_SAMPLES, N_FEATURES))


@pytest.mark.parametrize(("ours", "theirs", "target"), [
    ("srht", "GaussianRandomProjection", 2.0),
    ("sparse_sign", "SparseRandomProjection", 2.0),
    ("gaussian", "GaussianRandomProjection", None),
])
def test_vs_scikit_learn_random_projection(ours, theirs, target, projection_data, paired):
    """Target: ≥ 2× faster than scikit-learn's fit_transform at the same output dimension
    (X of 2000 samples × 8192 features → 512 components, float64), for sketchcore's fast
    operators: SRHT against the Gaussian projection, the sparse sign sketch against the
    sparse projection (with the same number of nonzeros per feature: scikit-learn's default
    density 1/√n_features). Gaussian against Gaussian has no target: both sides are the
    same dense GEMM plus a generation step, which caps the ratio well below 2."""
    random_projection = pytest.importorskip("sklearn.random_projection")
    X = projection_data
    if ours == "sparse_sign":
        op = sketch.sparse_sign(COMPONENTS, N_FEATURES, max(1, round(COMPONENTS / np.sqrt(N_FEATURES))), seed=3)
    else:
        op = getattr(sketch, ours)(COMPONENTS, N_FEATURES, seed=3)
    estimator = getattr(random_projection, theirs)
    fit_transform = lambda: estimator(n_components=COMPONENTS, random_state=0).fit_transform(X)  # noqa: E731
    y = X @ op.T
    ref = X @ op.to_dense().T
    assert np.linalg.norm(y - ref) <= 1e-12 * np.linalg.norm(ref)
    assert fit_transform().shape == y.shape
    paired("sketch vs scikit-learn", f"{ours}: X @ S.T", f"scikit-learn {theirs}", lambda: X @ op.T, fit_transform,
           pairs=5, calls=2, target=target)


@pytest.mark.parametrize("kind", ["gaussian", "rademacher", "uniform"])
def test_dense_generation_throughput(kind, benchmark):
    """No target: bytes of operator generated per second (float32, 1024 × 16384 = 64 MiB)."""
    op = getattr(sketch, kind)(1024, 16384, seed=2)
    out = np.empty((1024, 16384), np.float32)
    from sketchcore import _sketch
    generate = lambda: _sketch.to_dense(*op._args(), out)  # noqa: E731
    benchmark.pedantic(generate, rounds=5, iterations=1, warmup_rounds=1)
    median = benchmark.stats.stats.median
    benchmark.extra_info["gigabytes_per_second"] = out.nbytes / median / 1e9
    INFO[f"{kind} generation (float32, 64 MiB)"] = f"{out.nbytes / median / 1e9:.2f} GB/s (median of 5)"
    # The generated block is the operator: spot-check it against an independently generated block.
    np.testing.assert_array_equal(op.block(slice(100, 104), slice(5000, 5010), "float32"), out[100:104, 5000:5010])
