"""sketchcore.linalg: the randomized SVD and range finder on sketchcore's own sketches, against
the optimal (Eckart–Young) error in float64, in NumPy and torch, with every bad argument."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sketchcore import linalg


def spectrum(kind, d):
    i = np.arange(1, d + 1, dtype=np.float64)
    if kind == "exp":
        return np.exp(-i / 8)
    if kind == "sqrt":
        return 1 / np.sqrt(i)
    return np.ones(d)


def with_spectrum(rng, m, n, s):
    U, _ = np.linalg.qr(rng.standard_normal((m, len(s))))
    V, _ = np.linalg.qr(rng.standard_normal((n, len(s))))
    return (U * s) @ V.T


def optimal_error(s, rank):
    return np.sqrt(np.sum(s[rank:] ** 2) / np.sum(s**2))


def error(A, U, s, Vt):
    return np.linalg.norm(A - (U * s) @ Vt) / np.linalg.norm(A)


@pytest.mark.parametrize("kind", ["exp", "sqrt", "flat"])
@pytest.mark.parametrize("sketch", ["gaussian", "srht", "sparse_sign", "rademacher"])
@pytest.mark.parametrize("rank", [8, 32, 96])
def test_error_within_ten_percent_of_optimal(rng, kind, sketch, rank):
    d = 384
    s = spectrum(kind, d)
    A = with_spectrum(rng, d, d, s)
    U, sv, Vt = linalg.rsvd(A, rank, sketch=sketch, seed=int(rng.integers(2**32)))
    assert U.shape == (d, rank) and sv.shape == (rank,) and Vt.shape == (rank, d)
    assert error(A, U, sv, Vt) <= 1.1 * optimal_error(s, rank) + 1e-12
    np.testing.assert_allclose(U.T @ U, np.eye(rank), atol=1e-10)
    np.testing.assert_allclose(Vt @ Vt.T, np.eye(rank), atol=1e-10)
    assert np.all(np.diff(sv) <= 1e-12)


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 40), n=st.integers(1, 40), data=st.data())
def test_exact_low_rank_matrices_are_recovered(m, n, data):
    rank = data.draw(st.integers(1, min(m, n)))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    A = rng.standard_normal((m, rank)) @ rng.standard_normal((rank, n))
    U, s, Vt = linalg.rsvd(A, rank, oversample=data.draw(st.integers(0, 5)), seed=1)
    np.testing.assert_allclose((U * s) @ Vt, A, atol=1e-8 * max(1.0, np.abs(A).max()))


def test_same_seed_same_factors_and_float32_stays_float32(rng):
    A = rng.standard_normal((60, 50)).astype(np.float32)
    first = linalg.rsvd(A, 5, seed=7)
    second = linalg.rsvd(A, 5, seed=7)
    for a, b in zip(first, second):
        assert a.dtype == np.float32
        np.testing.assert_array_equal(a, b)


def test_torch_in_torch_out(rng):
    torch = pytest.importorskip("torch")
    s = spectrum("exp", 100)
    A = with_spectrum(rng, 120, 100, s)
    U, sv, Vt = linalg.rsvd(torch.from_numpy(A), 10, seed=3)
    assert all(isinstance(t, torch.Tensor) for t in (U, sv, Vt))
    assert error(A, U.numpy(), sv.numpy(), Vt.numpy()) <= 1.1 * optimal_error(s, 10)


def test_rangefinder_spans_the_dominant_subspace(rng):
    s = spectrum("exp", 150)
    A = with_spectrum(rng, 150, 200, s)
    Q = linalg.rangefinder(A, 30, seed=4)
    assert Q.shape == (150, 30)
    residual = np.linalg.norm(A - Q @ (Q.T @ A)) / np.linalg.norm(A)
    np.testing.assert_allclose(Q.T @ Q, np.eye(30), atol=1e-10)
    # No oversampling here (rsvd adds it): the power iterations alone keep it near optimal.
    assert residual <= 1.25 * optimal_error(s, 30)


@pytest.mark.parametrize(("args", "kwargs", "error", "match"), [
    ((np.ones(5), 1), {}, ValueError, r"rsvd: A: expected a 2-D array, got shape \(5,\)"),
    ((np.ones((4, 6)), 0), {}, ValueError, "rsvd: rank: expected an integer ≥ 1, got 0"),
    ((np.ones((4, 6)), 5), {}, ValueError, r"rsvd: rank: expected at most min\(m, n\) = 4, got 5"),
    ((np.ones((4, 6)), 2.0), {}, TypeError, "rsvd: rank: expected an int, got float"),
    ((np.ones((4, 6)), 2), {"oversample": -1}, ValueError, "rsvd: oversample: expected an integer ≥ 0, got -1"),
    ((np.ones((4, 6)), 2), {"power_iters": -2}, ValueError, "rsvd: power_iters: expected an integer ≥ 0, got -2"),
    ((np.ones((4, 6)), 2), {"sketch": "fourier"}, ValueError, "rsvd: sketch: expected one of"),
    (([[1.0, 2.0], [3.0, 4.0]], 1), {}, ValueError, r"rsvd: A: expected a 2-D array"),
])
def test_bad_arguments_are_named(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        linalg.rsvd(*args, **kwargs)


def test_unsupported_array_type_is_a_type_error():
    class Matrix:
        shape = (3, 3)

    with pytest.raises(TypeError, match="rsvd: A: expected a NumPy array, a torch tensor"):
        linalg.rsvd(Matrix(), 1)
