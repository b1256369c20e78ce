"""Data-aware (whitened) truncation: for every shape, including rank-deficient activations, the
factors reach the minimum output error ‖X(M − N)‖_F over rank-r N — computed independently from
the SVD of X M in float64 (Eckart–Young) and by a brute-force optimiser — for LowRankLinear's
and SKLinear's factors; the tolerance picks the smallest rank; the error formula from the Gram
matrix equals the error on the activations."""
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
from sketchcore.torch.compress import _whitened  # noqa: E402


def problem(seed, n, p, n_in, n_out):
    """Activations X (n × n_in) of rank ≤ p (collinear columns when p < n_in) and a weight M."""
    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(n, p, generator=gen, dtype=torch.float64) @ torch.randn(p, n_in, generator=gen,
                                                                              dtype=torch.float64)
    X = X * torch.exp(torch.randn(n_in, generator=gen, dtype=torch.float64))  # anisotropic, like real features
    M = torch.randn(n_in, n_out, generator=gen, dtype=torch.float64)
    return X, M


def relative_output_error(X, N, M):
    return float(torch.linalg.norm(X @ (N - M)) / torch.linalg.norm(X @ M))


def optimum(X, M, rank):
    """min over rank-``rank`` N of ‖X(M − N)‖/‖XM‖: the tail of X M's singular values
    (attained by N = X⁺ (XM)_r), computed without the Gram matrix."""
    s = torch.linalg.svdvals(X @ M)
    return math.sqrt(float((s[rank:] ** 2).sum() / (s**2).sum()))


shapes = st.tuples(st.integers(0, 2**31 - 1), st.integers(1, 24), st.integers(1, 10), st.integers(1, 10),
                   st.integers(1, 10))


@settings(max_examples=80, deadline=None)
@given(shapes, st.integers(1, 10))
def test_lowrank_factors_reach_the_minimum_output_error(shape, rank):
    seed, n, p, n_in, n_out = shape
    X, M = problem(seed, n, p, n_in, n_out)
    if float(torch.linalg.norm(X @ M)) < 1e-8:
        return
    rank = min(rank, n_in, n_out)
    s, Vt = _whitened.whitened_svd(M, X.t() @ X)
    A, B = _whitened.lowrank_factors(M, Vt, rank)
    assert A.shape == (n_in, rank) and B.shape == (rank, n_out)
    assert relative_output_error(X, A @ B, M) == pytest.approx(optimum(X, M, rank), abs=1e-6)
    reference = torch.linalg.svdvals(X @ M)
    common = min(len(s), len(reference))
    torch.testing.assert_close(s[:common], reference[:common], rtol=0, atol=1e-6 * float(reference[0]))
    # balanced: each column of A has the norm of the matching row of B
    torch.testing.assert_close(torch.linalg.vector_norm(A, dim=0), torch.linalg.vector_norm(B, dim=1), rtol=1e-9,
                               atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(shapes, st.integers(1, 3), st.integers(1, 4))
def test_sklinear_factors_reach_the_minimum_output_error(shape, terms, k):
    seed, n, p, n_in, n_out = shape
    X, M = problem(seed, n, p, n_in, n_out)
    if float(torch.linalg.norm(X @ M)) < 1e-8:
        return
    _, Vt = _whitened.whitened_svd(M, X.t() @ X)
    S1s, S2s, U1s, U2s = _whitened.sklinear_factors(M, Vt, terms, k, torch.Generator().manual_seed(seed))
    assert (S1s.shape, S2s.shape, U1s.shape, U2s.shape) == ((terms, n_in, k), (terms, k, n_out), (terms, k, n_out),
                                                            (terms, n_in, k))
    N = (torch.bmm(S1s, U1s).sum(0) + torch.bmm(U2s, S2s).sum(0)) / (2 * terms)
    used = min(2 * terms * k, n_in, n_out)
    assert relative_output_error(X, N, M) == pytest.approx(optimum(X, M, used), abs=1e-6)
    for t in range(terms):  # the fixed factors are orthonormal directions where they exist
        first = U1s[t, :max(0, min(k, used - 2 * t * k))]
        second = U2s[t][:, :max(0, min(k, used - (2 * t + 1) * k))]
        torch.testing.assert_close(first @ first.t(), torch.eye(len(first), dtype=torch.float64))
        torch.testing.assert_close(second.t() @ second, torch.eye(second.shape[1], dtype=torch.float64))


@pytest.mark.parametrize(("n", "p", "n_in", "n_out", "rank"), [(30, 6, 6, 5, 2), (12, 3, 7, 6, 2), (4, 4, 8, 8, 3),
                                                              (40, 5, 5, 9, 1)])
def test_no_optimiser_finds_a_smaller_output_error(n, p, n_in, n_out, rank):
    """Brute force: alternating least squares over rank-r products A B (each step the exact
    minimiser in one factor, so the error never increases) from random starts never beats the
    whitened truncation (rank-deficient activations included)."""
    X, M = problem(n * 1000 + n_in, n, p, n_in, n_out)
    _, Vt = _whitened.whitened_svd(M, X.t() @ X)
    A, B = _whitened.lowrank_factors(M, Vt, rank)
    ours = relative_output_error(X, A @ B, M)
    gen = torch.Generator().manual_seed(n_in)
    target = (X @ M).t().reshape(-1)  # column-major vec(X M)
    best = math.inf
    for _ in range(2):
        b = torch.randn(rank, n_out, generator=gen, dtype=torch.float64)
        for _ in range(60):
            # vec(X A B) = (Bᵀ ⊗ X) vec(A), column-major
            a = torch.linalg.lstsq(torch.kron(torch.empty(n_out, rank, dtype=torch.float64).copy_(b.t()), X), target[:, None], driver="gelsd").solution
            a = a.reshape(rank, n_in).t()
            b = torch.linalg.lstsq(X @ a, X @ M, driver="gelsd").solution
        best = min(best, relative_output_error(X, a @ b, M))
    assert ours <= best + 1e-9
    assert best <= ours + 1e-3  # the optimiser got there too: the comparison has teeth


@settings(max_examples=40, deadline=None)
@given(shapes, st.floats(0.0, 0.99))
def test_tolerance_picks_the_smallest_rank_meeting_it(shape, tolerance):
    seed, n, p, n_in, n_out = shape
    X, M = problem(seed, n, p, n_in, n_out)
    if float(torch.linalg.norm(X @ M)) < 1e-8:
        return
    s, Vt = _whitened.whitened_svd(M, X.t() @ X)
    rank, error = _whitened.rank_for_output_tolerance(s, tolerance)

    def achieved(r):
        A, B = _whitened.lowrank_factors(M, Vt, r)
        return relative_output_error(X, A @ B, M)

    assert achieved(rank) <= tolerance + 1e-9 and error == pytest.approx(achieved(rank), abs=1e-6)
    if rank > 1:
        assert achieved(rank - 1) > tolerance - 1e-9


def test_zero_outputs_need_rank_one_and_report_no_error():
    assert _whitened.rank_for_output_tolerance(torch.zeros(4, dtype=torch.float64), 0.1) == (1, 0.0)
    M = torch.randn(3, 2, dtype=torch.float64)
    assert _whitened.output_error(torch.zeros(3, 2), M, torch.zeros(3, 3)) == 0.0


@settings(max_examples=30, deadline=None)
@given(shapes)
def test_output_error_from_the_gram_matrix_is_the_error_on_the_activations(shape):
    seed, n, p, n_in, n_out = shape
    X, M = problem(seed, n, p, n_in, n_out)
    if float(torch.linalg.norm(X @ M)) < 1e-8:
        return
    N = M + 0.1 * torch.randn(n_in, n_out, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    assert _whitened.output_error(N, M, X.t() @ X) == pytest.approx(relative_output_error(X, N, M), rel=1e-6, abs=1e-9)
