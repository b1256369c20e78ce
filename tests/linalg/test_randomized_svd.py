"""sketchcore.linalg.randomized_svd (Panther's call shape, V not Vᵀ): within 1.05× of the optimal
rank-k error on decaying spectra, orthonormal factors, the tol stop, NumPy and torch, every bad
argument."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sketchcore import linalg


def with_spectrum(rng, m, n, s):
    U, _ = np.linalg.qr(rng.standard_normal((m, len(s))))
    V, _ = np.linalg.qr(rng.standard_normal((n, len(s))))
    return (U * s) @ V.T


def optimal(s, k):
    return np.sqrt(np.sum(s[k:] ** 2))


@pytest.mark.parametrize("decay", ["exp", "power1", "power0.5"])
@pytest.mark.parametrize("k", [5, 30, 100])
def test_within_five_percent_of_optimal(rng, decay, k):
    i = np.arange(1, 301, dtype=np.float64)
    s = {"exp": np.exp(-i / 10), "power1": 1 / i, "power0.5": 1 / np.sqrt(i)}[decay]
    A = with_spectrum(rng, 500, 300, s)
    U, S, V = linalg.randomized_svd(A, k, 0.0, seed=1)
    assert U.shape == (500, k) and S.shape == (k,) and V.shape == (300, k)
    assert np.linalg.norm(A - (U * S) @ V.T) <= 1.05 * optimal(s, k)
    np.testing.assert_allclose(U.T @ U, np.eye(k), atol=1e-10)
    np.testing.assert_allclose(V.T @ V, np.eye(k), atol=1e-10)
    assert np.all(np.diff(S) <= 0)


@settings(max_examples=20, deadline=None)
@given(m=st.integers(1, 120), n=st.integers(1, 120), seed=st.integers(0, 2**31 - 1), data=st.data())
def test_any_shape_exact_for_full_rank_width(m, n, seed, data):
    """With k + oversample ≥ min(m, n) the factorization is exact at k = min(m, n), and the
    singular values are the exact ones for any k."""
    k = data.draw(st.integers(1, min(m, n)))
    block = data.draw(st.integers(1, 70))
    A = np.random.default_rng(seed).standard_normal((m, n))
    U, S, V = linalg.randomized_svd(A, k, 0.0, block_size=block, oversample=min(m, n), seed=seed)
    assert U.shape == (m, k) and V.shape == (n, k)
    np.testing.assert_allclose(S, np.linalg.svd(A, compute_uv=False)[:k], rtol=1e-8, atol=1e-10)


def test_tol_stops_early_at_the_smallest_rank_meeting_it(rng):
    s = np.exp(-np.arange(200) / 6)
    A = with_spectrum(rng, 400, 200, s)
    U, S, V = linalg.randomized_svd(A, 150, 1e-3, block_size=16, seed=2)
    r = len(S)
    best = np.array([optimal(s, j) for j in range(200)]) / np.linalg.norm(s)
    assert r == int(np.argmax(best <= 1e-3))  # the optimal rank for that tolerance
    assert np.linalg.norm(A - (U * S) @ V.T) <= 1e-3 * np.linalg.norm(A)


def test_torch_in_torch_out(rng):
    s = 0.8 ** np.arange(80)
    A = torch.from_numpy(with_spectrum(rng, 200, 120, s))
    U, S, V = linalg.randomized_svd(A, 10, 1e-12, seed=3)
    assert isinstance(U, torch.Tensor) and U.dtype == torch.float64 and V.shape == (120, 10)
    error = torch.linalg.norm(A - U @ torch.diag(S) @ V.T).item()
    assert error <= 1.05 * optimal(s, 10)


def test_same_seed_same_result(rng):
    A = rng.standard_normal((60, 40))
    for x, y in zip(linalg.randomized_svd(A, 5, seed=7), linalg.randomized_svd(A, 5, seed=7)):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("args, kwargs, error, match", [
    ((np.ones(4), 1), {}, ValueError, r"randomized_svd: A: expected a 2-D array, got shape \(4,\)"),
    ((np.ones((4, 3)), 0), {}, ValueError, r"randomized_svd: k: expected an integer ≥ 1, got 0"),
    ((np.ones((4, 3)), 4), {}, ValueError, r"randomized_svd: k: expected at most min\(m, n\) = 3, got 4"),
    ((np.ones((4, 3)), 2.0), {}, TypeError, r"randomized_svd: k: expected an int, got float"),
    ((np.ones((4, 3)), 2, -1e-3), {}, ValueError, r"randomized_svd: tol: expected a finite number ≥ 0.0"),
    ((np.ones((4, 3)), 2, float("nan")), {}, ValueError, r"randomized_svd: tol: expected a finite number"),
    ((np.ones((4, 3)), 2), {"oversample": -1}, ValueError, r"randomized_svd: oversample: expected an integer ≥ 0"),
    ((np.ones((4, 3)), 2), {"power_iters": -1}, ValueError, r"randomized_svd: power_iters: expected an integer"),
    ((np.ones((4, 3)), 2), {"block_size": 0}, ValueError, r"randomized_svd: block_size: expected an integer ≥ 1"),
    ((np.ones((4, 3)), 2), {"sketch": "nope"}, ValueError, r"randomized_svd: sketch: expected one of"),
    (("abc", 2), {}, ValueError, r"randomized_svd: A: expected a 2-D array"),
])
def test_errors(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        linalg.randomized_svd(*args, **kwargs)


def test_unsupported_array_type():
    class Fake:
        shape = (3, 3)
    with pytest.raises(TypeError, match=r"randomized_svd: A: expected a NumPy array"):
        linalg.randomized_svd(Fake(), 1)
