"""Sketching operators: determinism, consistency of blocks with the whole, statistics of
every distribution (fixed seeds: deterministic, not flaky), application against the dense
reference on every side, and every error."""
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sketchcore
from _fake_dlpack import FakeProducer
from _philox import philox4x32_10
from sketchcore import sketch

KINDS = ["gaussian", "rademacher", "uniform", "sparse_sign", "countsketch", "srht"]


def make(kind, m, n, seed=7, **kw):
    return getattr(sketch, kind)(m, n, seed=seed, **kw)


@pytest.mark.parametrize("kind", KINDS)
def test_same_seed_same_bits_different_seed_different_bits(kind):
    a, b, c = make(kind, 40, 300, 11).to_dense(), make(kind, 40, 300, 11).to_dense(), make(kind, 40, 300, 12).to_dense()
    np.testing.assert_array_equal(a, b)
    assert (a != c).mean() > 0.01


@pytest.mark.parametrize("kind", KINDS)
def test_bits_do_not_depend_on_thread_count(kind):
    op = make(kind, 64, 1000, 5)
    A = np.random.default_rng(0).standard_normal((1000, 33))
    before = sketchcore.get_num_threads()
    try:
        results = []
        for threads in (1, 2, 3):
            sketchcore.set_num_threads(threads)
            results.append((op.to_dense(), op @ A, A.T @ op.T))
    finally:
        sketchcore.set_num_threads(before)
    for dense, left, right in results[1:]:
        np.testing.assert_array_equal(dense, results[0][0])
        np.testing.assert_allclose(left, results[0][1], rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(right, results[0][2], rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_any_block_equals_that_block_of_the_whole(kind, dtype):
    op = make(kind, 37, 150, 3)
    whole = op.to_dense(dtype)
    for rows, cols in [(slice(0, 37), slice(0, 150)), (slice(5, 9), slice(17, 93)), (slice(36, 37), slice(149, 150)),
                       (slice(3, 30), slice(0, 1))]:
        np.testing.assert_array_equal(op.block(rows, cols, dtype), whole[rows, cols])
    np.testing.assert_array_equal(op.T.block(slice(17, 93), slice(5, 9), dtype), whole.T[17:93, 5:9])


@pytest.mark.parametrize("kind", ["gaussian", "rademacher", "uniform", "sparse_sign", "countsketch"])
def test_wider_operator_extends_the_narrower_one(kind):
    # Column j depends only on (seed, m, j): more columns append, never change.
    np.testing.assert_array_equal(make(kind, 20, 50).to_dense(), make(kind, 20, 80).to_dense()[:, :50])


STREAMS = {"gaussian": 0x47415553, "rademacher": 0x52414445, "uniform": 0x554E4946}


def documented_dense_entries(kind, m, n, seed):
    """The unscaled entries of the table in sketch.hpp, from an independent NumPy Philox:
    block (i/4, j, 0, stream), lane i%4; Box–Muller with NumPy's log/cos/sin."""
    i = np.arange(m, dtype=np.uint64)[:, None] + np.zeros((1, n), np.uint64)
    j = np.arange(n, dtype=np.uint64)[None, :] + np.zeros((m, 1), np.uint64)
    words = np.stack(philox4x32_10(i >> np.uint64(2), j, 0 * i, np.full(i.shape, STREAMS[kind]),
                                   seed & 0xFFFFFFFF, seed >> 32))
    lane = (np.arange(m) % 4)[:, None] + np.zeros((1, n), int)
    unit = (words.astype(np.float64) + 0.5) * 2.0**-32
    pick = lambda w: np.take_along_axis(w, lane[None], axis=0)[0]  # noqa: E731
    if kind == "rademacher":
        return np.where(pick(words) >> np.uint64(31), -1.0, 1.0)
    if kind == "uniform":
        return math.sqrt(3) * (2 * pick(unit) - 1)
    first = np.take_along_axis(unit, (lane[None] // 2) * 2, axis=0)[0]
    second = np.take_along_axis(unit, (lane[None] // 2) * 2 + 1, axis=0)[0]
    radius, angle = np.sqrt(-2 * np.log(first)), 2 * np.pi * second
    return np.where(lane % 2 == 1, radius * np.sin(angle), radius * np.cos(angle))


@pytest.mark.parametrize("kind", ["gaussian", "rademacher", "uniform"])
def test_dense_entries_are_the_documented_mapping(kind):
    seed = 0xFEEDFACE12345678
    got = make(kind, 37, 129, seed, scale=False).to_dense()
    expected = documented_dense_entries(kind, 37, 129, seed)
    if kind == "gaussian":  # own log/sin/cos (same bits on every device) against NumPy's
        np.testing.assert_allclose(got, expected, rtol=0, atol=2e-15 * (1 + np.abs(expected)).max())
    else:
        np.testing.assert_array_equal(got, expected)
    scaled = make(kind, 37, 129, seed).to_dense()
    np.testing.assert_array_equal(scaled, got * (1 / math.sqrt(37)))


def ks_statistic(samples, cdf):
    x = np.sort(samples)
    n = len(x)
    f = cdf(x)
    return max(np.max(np.arange(1, n + 1) / n - f), np.max(f - np.arange(n) / n))


def test_gaussian_entries_are_normal_with_variance_one_over_m():
    m = 200
    d = sketch.gaussian(m, 2000, seed=2026).to_dense().ravel()
    n = d.size
    assert abs(d.mean()) < 6 / math.sqrt(m * n)
    assert abs(d.var() * m - 1) < 6 * math.sqrt(2 / n)
    phi = np.vectorize(lambda v: 0.5 * math.erfc(-v / math.sqrt(2)))
    assert ks_statistic(d[:20000] * math.sqrt(m), phi) < 1.95 / math.sqrt(20000)  # KS at α = 0.001


def test_uniform_entries_are_uniform_with_variance_one_over_m():
    m = 50
    d = sketch.uniform(m, 4000, seed=9).to_dense().ravel()
    bound = math.sqrt(3 / m)
    assert np.all(np.abs(d) < bound)
    assert abs(d.var() * m - 1) < 6 * math.sqrt(0.8 / d.size)
    assert ks_statistic(d[:20000], lambda v: (v + bound) / (2 * bound)) < 1.95 / math.sqrt(20000)


def test_rademacher_entries_are_plus_minus_one_over_sqrt_m():
    m = 64
    d = sketch.rademacher(m, 3000, seed=4).to_dense()
    np.testing.assert_array_equal(np.abs(d), 1 / math.sqrt(m))
    assert abs(np.sign(d).mean()) < 6 / math.sqrt(d.size)
    np.testing.assert_array_equal(sketch.rademacher(m, 30, seed=4, scale=False).to_dense(), np.sign(d[:, :30]))


@pytest.mark.parametrize(("m", "nnz"), [(50, 1), (50, 8), (40, 40), (1000, 70)])
def test_sparse_sign_has_exactly_nnz_distinct_rows_per_column(m, nnz):
    n = 500
    d = sketch.sparse_sign(m, n, nnz, seed=31).to_dense()
    np.testing.assert_array_equal((d != 0).sum(axis=0), nnz)
    np.testing.assert_array_equal(np.abs(d[d != 0]), 1 / math.sqrt(nnz))
    # Rows are hit uniformly: n·nnz/m per row on average (binomial spread, 6σ).
    per_row = (d != 0).sum(axis=1)
    expected = n * nnz / m
    if nnz < m:
        assert np.all(np.abs(per_row - expected) < 6 * math.sqrt(expected) + 1)
    assert abs(np.sign(d[d != 0]).mean()) < 6 / math.sqrt(n * nnz)


def test_countsketch_is_one_signed_entry_per_column():
    d = sketch.countsketch(30, 400, seed=8).to_dense()
    np.testing.assert_array_equal((d != 0).sum(axis=0), 1)
    np.testing.assert_array_equal(np.abs(d[d != 0]), 1.0)


def test_srht_rows_are_orthogonal_and_unbiased():
    m, n = 64, 1024
    d = sketch.srht(m, n, seed=5).to_dense()
    np.testing.assert_allclose(d @ d.T, (n / m) * np.eye(m), atol=1e-10)  # R·H·D has orthonormal rows
    np.testing.assert_array_equal(np.abs(d), 1 / math.sqrt(m))
    padded = sketch.srht(30, 1000, seed=5).to_dense()  # n padded to 1024: the first 1000 columns
    assert padded.shape == (30, 1000)


@pytest.mark.parametrize("kind", KINDS)
def test_expected_gram_matrix_is_identity(kind):
    m, n, seeds = (8, 16, 400) if kind == "srht" else (16, 6, 400)  # srht samples m ≤ n' rows
    mean = sum(make(kind, m, n, s).to_dense().T @ make(kind, m, n, s).to_dense() for s in range(seeds)) / seeds
    # Diagonal: exactly 1 for the sparse and sign kinds, ≈ 1 otherwise; off-diagonal ≈ 0.
    np.testing.assert_allclose(mean, np.eye(n), atol=6 * math.sqrt(2 / (m * seeds)) + 1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_norms_are_preserved_within_the_jl_bound(kind):
    eps = 0.5
    n_points = 100
    m = sketch.jl_min_dim(n_points, eps)
    n = 2048
    X = np.random.default_rng(17).standard_normal((n, n_points))
    ratios = np.sum((make(kind, m, n, 99, **({"nnz": 8} if kind == "sparse_sign" else {})) @ X) ** 2, 0) / np.sum(X**2, 0)
    assert np.all(np.abs(ratios - 1) < eps), (ratios.min(), ratios.max())


# ---------------------------------------------------------------------------- applying


def reference_apply(op, A, side):
    D = op.to_dense()
    return np.einsum("ij,...jp->...ip", D, A) if side == "left" else np.einsum("...pi,ij->...pj", A, D)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_apply_matches_the_dense_operator(kind, side, transpose, dtype):
    rng = np.random.default_rng(1)
    op = make(kind, 24, 70, 13)
    op = op.T if transpose else op
    m, n = op.shape
    A = rng.standard_normal((3, n, 9) if side == "left" else (3, 9, m)).astype(dtype)
    y = op.apply(A, side)
    assert y.dtype == dtype and y.shape == ((3, m, 9) if side == "left" else (3, 9, n))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    ref = reference_apply(op, A.astype(np.float64), side)
    assert np.linalg.norm(y - ref) <= tol * np.linalg.norm(ref)


@pytest.mark.parametrize("kind", KINDS)
def test_matmul_operators_vectors_and_strided_operands(kind):
    rng = np.random.default_rng(2)
    op = make(kind, 20, 64, 21)
    D = op.to_dense()
    x = rng.standard_normal(64)
    np.testing.assert_allclose(op @ x, D @ x, atol=1e-12)
    y = rng.standard_normal(20)
    np.testing.assert_allclose(y @ op, y @ D, atol=1e-12)
    A = rng.standard_normal((128, 30))[::2, ::3]  # non-contiguous both ways
    np.testing.assert_allclose(op @ A, D @ A, atol=1e-12)
    np.testing.assert_allclose(np.asfortranarray(A).T @ op.T, A.T @ D.T, atol=1e-12)
    out = np.zeros((20, 40))[:, ::4]
    assert op.apply(A, out=out) is out
    np.testing.assert_allclose(out, D @ A, atol=1e-12)


def test_apply_returns_the_framework_of_its_input():
    torch = pytest.importorskip("torch")
    op = sketch.srht(16, 100, seed=1)
    A = torch.randn(100, 5, dtype=torch.float64)
    y = op @ A
    assert isinstance(y, torch.Tensor)
    np.testing.assert_allclose(y.numpy(), op.to_dense() @ A.numpy(), atol=1e-12)
    dense = op.to_dense(like=A)
    assert isinstance(dense, torch.Tensor) and dense.dtype == torch.float64


def test_transpose_swaps_shape_and_is_its_own_inverse():
    op = sketch.gaussian(10, 30, seed=3)
    assert op.shape == (10, 30) and op.T.shape == (30, 10) and op.T.T.shape == (10, 30)
    np.testing.assert_array_equal(op.T.to_dense(), op.to_dense().T)
    assert "gaussian(10, 30, seed=3" in repr(op) and repr(op.T).endswith(".T")


# ------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(("call", "error", "fragment"), [
    (lambda: sketch.gaussian(0, 5, seed=1), ValueError, "m: expected an integer in [1, 2^31), got 0"),
    (lambda: sketch.rademacher(5, -2, seed=1), ValueError, "n: expected an integer in [1, 2^31), got -2"),
    (lambda: sketch.sparse_sign(5, 10, 0, seed=1), ValueError, "nnz: expected an integer in [1, m = 5], got 0"),
    (lambda: sketch.sparse_sign(5, 10, 6, seed=1), ValueError, "nnz: expected an integer in [1, m = 5], got 6"),
    (lambda: sketch.srht(300, 200, seed=1), ValueError, "m: expected at most n rounded up to a power of two (256)"),
    (lambda: sketch.gaussian(5.0, 5, seed=1), TypeError, "m: expected an int, got float"),
    (lambda: sketch.gaussian(5, 5, seed=-1), ValueError, "seed: expected an integer in [0, 2**64), got -1"),
    (lambda: sketch.gaussian(5, 5, seed="1"), TypeError, "seed: expected an int or None, got str"),
    (lambda: sketch.gaussian(4, 6, seed=1) @ np.ones((5, 2)), ValueError, "a: expected shape (..., 6, p)"),
    (lambda: np.ones((2, 5)) @ sketch.gaussian(4, 6, seed=1), ValueError, "a: expected shape (..., p, 4)"),
    (lambda: sketch.gaussian(4, 6, seed=1) @ np.ones((6, 2), dtype=np.int32), TypeError, "a: expected a floating-point array (float16, bfloat16, float32 or float64), got dtype int32"),
    (lambda: sketch.gaussian(4, 6, seed=1).apply(np.ones((6, 2)), side="up"), ValueError, "side: expected 'left' or 'right'"),
    (lambda: sketch.gaussian(4, 6, seed=1).apply(np.ones((6, 2)), out=np.ones((4, 3))), ValueError, "out: expected shape (4, 2)"),
    (lambda: sketch.gaussian(4, 6, seed=1).apply(np.ones((6, 2)), out=np.ones((4, 2), np.float32)), TypeError,
     "out: expected dtype float64"),
    (lambda: sketch.gaussian(4, 6, seed=1) @ [[1.0]], TypeError, "a: expected an array supporting DLPack"),
    (lambda: sketch.jl_min_dim(100, eps=1.5), ValueError, "eps: expected values in (0, 1)"),
    (lambda: sketch.jl_min_dim(0, eps=0.1), ValueError, "n_samples: expected positive numbers"),
])
def test_bad_arguments(call, error, fragment):
    with pytest.raises(error) as info:
        call()
    assert fragment in str(info.value)


def test_jl_min_dim_matches_scikit_learns_documented_values():
    # The examples in scikit-learn's johnson_lindenstrauss_min_dim docstring.
    assert sketch.jl_min_dim(1e6, eps=0.5) == 663
    np.testing.assert_array_equal(sketch.jl_min_dim(1e6, eps=[0.5, 0.1, 0.01]), [663, 11841, 1112658])
    np.testing.assert_array_equal(sketch.jl_min_dim([1e4, 1e5, 1e6], eps=0.1), [7894, 9868, 11841])


# ------------------------------------------------------------- CUDA arrays, host side

no_device = pytest.mark.skipif(sketchcore.cuda_device_count() > 0,
                               reason="host memory labelled as CUDA would reach a real device; test_gpu.py covers it")


@no_device
@pytest.mark.parametrize("kind", KINDS)
def test_cuda_arrays_without_a_device_raise_cleanly_and_are_asked_for_the_stream(kind):
    # Host memory labelled as cuda:0: a CUDA build reaches the CUDA runtime, which finds no
    # device (RuntimeError); a CPU-only build refuses the device (TypeError). Never a crash,
    # and the array is asked to be ready on the call's stream (legacy default: 1).
    op = make(kind, 4, 6, **({"nnz": 2} if kind == "sparse_sign" else {}))
    a, out = FakeProducer(np.ones((6, 3)), device=(2, 0)), FakeProducer(np.empty((4, 3)), device=(2, 0))
    dense_out = FakeProducer(np.empty((4, 6)), device=(2, 0))
    expected = (RuntimeError, "sketchcore: cuda") if sketchcore.build_info()["cuda"] else (
        TypeError, "a: expected an array in CPU memory (this build of sketchcore has no CUDA backend), got cuda:0")
    with pytest.raises(expected[0], match=re.escape(expected[1])):
        op.apply(a, out=out)
    with pytest.raises(expected[0], match="sketchcore: cuda" if sketchcore.build_info()["cuda"] else "out: expected"):
        sketchcore._sketch.to_dense(*op._args(), dense_out)
    if sketchcore.build_info()["cuda"]:
        assert [c.get("stream") for c in a.calls + out.calls + dense_out.calls] == [1, 1, 1]


def test_out_on_another_device_than_a_is_refused():
    op = make("gaussian", 4, 6)
    out = FakeProducer(np.empty((4, 3)), device=(2, 0))
    expected = "out: expected an array on cpu (the device of a), got cuda:0" if sketchcore.build_info()["cuda"] \
        else "out: expected an array in CPU memory"
    with pytest.raises(TypeError, match=re.escape(expected)):
        op.apply(np.ones((6, 3)), out=out)


@settings(max_examples=30, deadline=None)
@given(kind=st.sampled_from(["sparse_sign", "countsketch"]), rows=st.integers(1, 200), m=st.integers(1, 40),
       n=st.integers(1, 90), transpose=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_right_application_of_sparse_kinds_over_row_blocks_matches_dense_and_thread_counts(kind, rows, m, n,
                                                                                           transpose, seed):
    """The right application works on blocks of 64 rows: any row count, remainders included,
    equals the dense operator, bit for bit on one thread and on two."""
    op = make(kind, m, n, seed % 997, **({"nnz": min(m, 4)} if kind == "sparse_sign" else {}))
    op = op.T if transpose else op
    A = np.random.default_rng(seed).standard_normal((rows, op.shape[0]))
    y = A @ op
    ref = A @ op.to_dense()
    assert np.linalg.norm(y - ref) <= 1e-12 * max(np.linalg.norm(ref), 1e-300)
    threads = sketchcore.get_num_threads()
    try:
        sketchcore.set_num_threads(1)
        single = A @ op
    finally:
        sketchcore.set_num_threads(threads)
    np.testing.assert_array_equal(single, y)
