"""sketchcore.linalg.cqrrpt: M[:, J] = Q R in float64 to 1e-10 (relative), Q orthonormal to 1e-8, R
upper triangular, J a permutation whose leading columns reveal the numerical rank and the decay,
on tall, wide, exactly and numerically rank-deficient matrices, in NumPy and torch, with every
bad argument."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sketchcore import linalg
from sketchcore.linalg import _cqrrpt


def check(M, Q, R, J, rec_tol=1e-10, orth_tol=1e-8):
    M, Q, R, J = (np.asarray(x) for x in (M, Q, R, J))
    assert sorted(J.tolist()) == list(range(M.shape[1]))
    assert np.array_equal(R, np.triu(R))
    k = Q.shape[1]
    assert R.shape == (k, M.shape[1])
    assert np.linalg.norm(Q.T @ Q - np.eye(k)) <= orth_tol
    assert np.linalg.norm(M[:, J] - Q @ R) <= rec_tol * np.linalg.norm(M)
    return k


def low_rank(rng, m, n, rank, noise=0.0):
    return rng.standard_normal((m, rank)) @ rng.standard_normal((rank, n)) + noise * rng.standard_normal((m, n))


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 400), n=st.integers(1, 60), seed=st.integers(0, 2**31 - 1),
       gamma=st.sampled_from([1.0, 1.25, 2.0]), sketch=st.sampled_from(["sparse_sign", "gaussian", "srht"]))
def test_full_rank_any_shape(m, n, seed, gamma, sketch):
    M = np.random.default_rng(seed).standard_normal((m, n))
    Q, R, J = linalg.cqrrpt(M, gamma, sketch=sketch, seed=seed)
    assert check(M, Q, R, J) == min(m, n)


def test_a_sketch_that_loses_a_column_is_redrawn_larger():
    """γ = 1 gives a square sketch (d = n), which need not embed M's columns: this 65 × 22 SRHT
    sketch (found by hypothesis) made the rank 21 and M[:, J] − QR 39% of M; the discarded columns
    are checked and the sketch redrawn twice as large."""
    M = np.random.default_rng(0).standard_normal((65, 22))
    Q, R, J = linalg.cqrrpt(M, 1.0, sketch="srht", seed=0)
    assert check(M, Q, R, J) == 22


@pytest.mark.parametrize("seed", [4, 18, 22])
def test_a_float32_sketch_that_loses_a_column_is_redrawn_too(seed):
    """float32's looser threshold must still tell a lost column (found in review: these 201 × 200
    matrices lost one with γ = 1, leaving M[:, J] − QR at 2.4% of M)."""
    M = np.random.default_rng(seed).standard_normal((201, 200)).astype(np.float32)
    Q, R, J = linalg.cqrrpt(M, 1.0, sketch="sparse_sign", seed=seed)
    assert Q.shape == (201, 200)
    error = np.linalg.norm(M[:, J].astype(np.float64) - Q.astype(np.float64) @ R) / np.linalg.norm(M)
    assert error <= 1e-5


@pytest.mark.parametrize("rank", [1, 7, 40])
def test_exactly_rank_deficient_reveals_the_rank(rng, rank):
    M = low_rank(rng, 2000, 80, rank)
    Q, R, J = linalg.cqrrpt(M, seed=1)
    assert check(M, Q, R, J) == rank


def test_numerically_rank_deficient_reveals_the_rank(rng):
    """Rank 25 plus noise at 1e-14 of the scale: the rank is 25 for the default tolerance, and
    the rank-25 factorization keeps the 1e-10 reconstruction bound."""
    M = low_rank(rng, 3000, 120, 25, noise=1e-14)
    Q, R, J = linalg.cqrrpt(M, seed=2)
    assert check(M, Q, R, J) == 25


def test_pivots_and_diagonal_reveal_the_decay(rng):
    """Columns scaled by 10^-i in a shuffled order: the pivots pick them largest first and |R_ii|
    decays as the column scales do."""
    n = 12
    scales = 10.0 ** -np.arange(n)
    order = rng.permutation(n)
    Qm, _ = np.linalg.qr(rng.standard_normal((500, n)))
    M = Qm * scales[order]
    Q, R, J = linalg.cqrrpt(M, seed=3)
    check(M, Q, R, J)
    assert np.array_equal(np.asarray(J), np.argsort(-scales[order]))
    np.testing.assert_allclose(np.abs(np.diag(R)), scales, rtol=1e-8)


def test_diagonal_of_r_tracks_the_singular_values(rng):
    s = np.logspace(0, -8, 60)
    U, _ = np.linalg.qr(rng.standard_normal((1500, 60)))
    V, _ = np.linalg.qr(rng.standard_normal((60, 60)))
    M = (U * s) @ V.T
    Q, R, J = linalg.cqrrpt(M, seed=4)
    check(M, Q, R, J)
    ratio = np.abs(np.diag(R)) / s
    assert ratio.max() / ratio.min() < 1e3  # rank revealing: within a modest factor across 8 decades


def test_torch_in_torch_out(rng):
    M = torch.from_numpy(low_rank(rng, 800, 50, 30))
    Q, R, J = linalg.cqrrpt(M, seed=5)
    assert isinstance(Q, torch.Tensor) and isinstance(R, torch.Tensor) and J.dtype == torch.int64
    assert Q.dtype == R.dtype == torch.float64
    assert check(M.numpy(), Q.numpy(), R.numpy(), J.numpy()) == 30


def test_float32(rng):
    M = rng.standard_normal((1000, 40)).astype(np.float32)
    Q, R, J = linalg.cqrrpt(M, seed=6)
    assert Q.dtype == R.dtype == np.float32
    check(M.astype(np.float64), Q.astype(np.float64), R.astype(np.float64), J, rec_tol=1e-5, orth_tol=1e-4)


def test_zero_matrix_gives_an_empty_exact_factorization():
    Q, R, J = linalg.cqrrpt(np.zeros((30, 5)))
    assert Q.shape == (30, 0) and R.shape == (0, 5) and sorted(J.tolist()) == list(range(5))


def test_same_seed_same_result(rng):
    M = rng.standard_normal((300, 20))
    a, b = linalg.cqrrpt(M, seed=9), linalg.cqrrpt(M, seed=9)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_householder_fallback_matches_lapack(rng):
    """The SciPy-less pivoted QR gives LAPACK's R up to the signs of its rows."""
    A = rng.standard_normal((40, 25)) * np.logspace(0, -3, 25)
    R1, J1 = _cqrrpt._householder_pivoted_r(A)
    R2, J2 = _cqrrpt._pivoted_qr_r(A)
    assert np.array_equal(J1, J2)
    np.testing.assert_allclose(np.abs(R1), np.abs(R2), atol=1e-12)


@pytest.mark.parametrize("args, error, match", [
    ((np.ones(5),), ValueError, r"cqrrpt: M: expected a 2-D array, got shape \(5,\)"),
    ((np.ones((4, 0)),), ValueError, r"cqrrpt: M: expected a non-empty matrix"),
    ((np.ones((5, 3)), 0.5), ValueError, r"cqrrpt: gamma: expected a finite number ≥ 1.0, got 0.5"),
    ((np.ones((5, 3)), "x"), TypeError, r"cqrrpt: gamma: expected a real number, got str"),
    ((np.ones((5, 3), dtype=np.int64),), TypeError, r"cqrrpt: M: expected float32 or float64, got int64"),
    ((np.full((5, 3), np.nan),), ValueError, r"cqrrpt: M: expected finite entries"),
])
def test_errors(args, error, match):
    with pytest.raises(error, match=match):
        linalg.cqrrpt(*args)


def test_keyword_errors():
    with pytest.raises(ValueError, match=r"cqrrpt: tol: expected a finite number ≥ 0.0, got -1"):
        linalg.cqrrpt(np.ones((5, 3)), tol=-1)
    with pytest.raises(ValueError, match=r"cqrrpt: sketch: expected one of"):
        linalg.cqrrpt(np.ones((50, 3)), sketch="nope")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"cqrrpt: seed: expected an integer ≥ 0, got -2"):
        linalg.cqrrpt(np.ones((5, 3)), seed=-2)
    with pytest.raises(TypeError, match=r"cqrrpt: M: expected a NumPy array"):
        linalg.cqrrpt([[1.0]])  # type: ignore[type-var]
