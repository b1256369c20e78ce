"""sketched_matmul_backward against central finite differences in float64 (an
independent check: it uses only the forward), for every activation, with bias, terms and
dropout; float32 against float64; requested subsets; errors."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import sketchcore
from _reference import ACTIVATIONS, random_problem


def forward(x, S, U, b, activation, scale, p, seed):
    r = S.shape[-1] * (S.shape[0] if S.ndim == 3 else 1)
    z = np.empty(x.shape[:-1] + (r,), dtype=x.dtype)
    y = sketchcore.sketched_matmul(x, S, U, bias=b, activation=activation, scale=scale, dropout_p=p, seed=seed,
                                   intermediate=z)
    return y, z


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize(("terms", "p"), [(None, 0.0), (3, 0.0), (3, 0.3)])
def test_gradients_match_finite_differences(rng, activation, terms, p):
    x, S, U, b = random_problem(rng, (2, 5), 7, 3, 6, terms=terms, dtype=np.float64)
    scale, seed = 0.7, 12345
    w = rng.standard_normal((2, 5, 6))  # L = Σ w ⊙ y, so dL/dy = w
    _, z = forward(x, S, U, b, activation, scale, p, seed)
    dx, dS, dU, db = sketchcore.sketched_matmul_backward(w, x, S, U, z, bias=b, activation=activation, scale=scale,
                                                         dropout_p=p, seed=seed)
    params = {"x": x, "S": S, "U": U, "b": b}
    grads = {"x": dx, "S": dS, "U": dU, "b": db}
    eps = 1e-6
    for name, value in params.items():
        for _ in range(3):
            direction = rng.standard_normal(value.shape)
            shifted = {k: v.copy() for k, v in params.items()}
            shifted[name] = value + eps * direction
            up = np.sum(w * forward(shifted["x"], shifted["S"], shifted["U"], shifted["b"], activation, scale, p, seed)[0])
            shifted[name] = value - eps * direction
            down = np.sum(w * forward(shifted["x"], shifted["S"], shifted["U"], shifted["b"], activation, scale, p, seed)[0])
            numeric = (up - down) / (2 * eps)
            analytic = np.sum(grads[name] * direction)
            assert abs(analytic - numeric) <= 1e-6 * max(1.0, abs(numeric)), (name, analytic, numeric)


def test_intermediate_is_x_times_the_packed_sketch(rng):
    x, S, U, _ = random_problem(rng, (4, 3), 10, 2, 5, terms=4, dtype=np.float64, bias=False)
    _, z = forward(x, S, U, None, "none", 1.0, 0.0, None)
    np.testing.assert_allclose(z, x @ S.transpose(1, 0, 2).reshape(10, 8), atol=1e-13)


@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_float32_matches_float64(rng, activation):
    x, S, U, b = random_problem(rng, (300,), 130, 8, 90, terms=4, dtype=np.float64)
    w = rng.standard_normal((300, 90))
    _, z64 = forward(x, S, U, b, activation, 0.5, 0.2, 7)
    g64 = sketchcore.sketched_matmul_backward(w, x, S, U, z64, bias=b, activation=activation, scale=0.5,
                                              dropout_p=0.2, seed=7)
    f = [a.astype(np.float32) for a in (x, S, U, b, w)]
    _, z32 = forward(f[0], f[1], f[2], f[3], activation, 0.5, 0.2, 7)
    g32 = sketchcore.sketched_matmul_backward(f[4], f[0], f[1], f[2], z32, bias=f[3], activation=activation,
                                              scale=0.5, dropout_p=0.2, seed=7)
    for a, b_ in zip(g32, g64):
        assert a.dtype == np.float32
        assert np.linalg.norm(a - b_) <= 1e-5 * np.linalg.norm(b_)


def test_long_batch_spans_several_chunks(rng):
    # d_out = 4096 float64: chunks of 512 rows, so 1300 rows take three.
    x, S, U, b = random_problem(rng, (1300,), 16, 2, 4096, terms=2, dtype=np.float64)
    w = rng.standard_normal((1300, 4096))
    _, z = forward(x, S, U, b, "silu", 1.0, 0.1, 3)
    dx, dS, dU, db = sketchcore.sketched_matmul_backward(w, x, S, U, z, bias=b, activation="silu", dropout_p=0.1,
                                                         seed=3)
    halves = [slice(0, 650), slice(650, 1300)]
    # The gradients of the factors and bias add over rows: recompute on halves and sum.
    parts = []
    for h in halves:
        _, zh = forward(x[h], S, U, b, "silu", 1.0, 0.0, None)
        # A half alone would regenerate its dropout rows from 0; use p = 0 for this additivity check.
        parts.append(sketchcore.sketched_matmul_backward(w[h], x[h], S, U, zh, bias=b, activation="silu"))
    full = sketchcore.sketched_matmul_backward(w, x, S, U, z, bias=b, activation="silu")
    for i in (1, 2, 3):
        np.testing.assert_allclose(parts[0][i] + parts[1][i], full[i], rtol=1e-10, atol=1e-9)
    np.testing.assert_allclose(np.concatenate([parts[0][0], parts[1][0]]), full[0], rtol=1e-12, atol=1e-12)
    assert dx.shape == x.shape and dS.shape == S.shape and dU.shape == U.shape and db.shape == b.shape


def test_only_requested_gradients_are_returned(rng):
    x, S, U, b = random_problem(rng, (6,), 5, 2, 4, terms=2, dtype=np.float64)
    _, z = forward(x, S, U, b, "relu", 1.0, 0.0, None)
    w = rng.standard_normal((6, 4))
    full = sketchcore.sketched_matmul_backward(w, x, S, U, z, bias=b, activation="relu")
    some = sketchcore.sketched_matmul_backward(w, x, S, U, z, bias=b, activation="relu", needs=("S", "bias"))
    assert some[0] is None and some[2] is None
    np.testing.assert_allclose(some[1], full[1], rtol=1e-14)
    np.testing.assert_allclose(some[3], full[3], rtol=1e-14)


@settings(max_examples=40, deadline=None)
@given(terms=st.integers(1, 5), data=st.data(), with_dx=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_term_ranges_give_slices_of_the_full_gradients(terms, data, with_dx, seed):
    rng = np.random.default_rng(seed)
    s_begin = data.draw(st.integers(0, terms))
    s_end = data.draw(st.integers(s_begin, terms))
    u_begin = data.draw(st.integers(0, terms))
    u_end = data.draw(st.integers(u_begin, terms))
    x, S, U, b = random_problem(rng, (7,), 6, 3, 5, terms=terms, dtype=np.float64)
    _, z = forward(x, S, U, b, "gelu", 0.5, 0.0, None)
    w = rng.standard_normal((7, 5))
    full = sketchcore.sketched_matmul_backward(w, x, S, U, z, bias=b, activation="gelu", scale=0.5)
    needs = ("x", "S", "U") if with_dx else ("S", "U")
    part = sketchcore.sketched_matmul_backward(w, x, S, U, z, bias=b, activation="gelu", scale=0.5, needs=needs,
                                               S_terms=(s_begin, s_end), U_terms=(u_begin, u_end))
    assert part[1].shape == (s_end - s_begin, 6, 3) and part[2].shape == (u_end - u_begin, 3, 5)
    np.testing.assert_allclose(part[1], full[1][s_begin:s_end], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(part[2], full[2][u_begin:u_end], rtol=1e-12, atol=1e-14)
    if with_dx:
        np.testing.assert_allclose(part[0], full[0], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize(("S", "U", "kwargs", "error", "fragment"), [
    ((2, 5, 1), (2, 1, 4), dict(S_terms=(1, 3)), ValueError, "S_terms: expected a range 0 ≤ begin ≤ end ≤ T = 2, got [1, 3)"),
    ((2, 5, 1), (2, 1, 4), dict(U_terms=(2, 1)), ValueError, "U_terms: expected a range 0 ≤ begin ≤ end ≤ T = 2, got [2, 1)"),
    ((2, 5, 1), (2, 1, 4), dict(S_terms=(-1, 1)), ValueError, "S_terms: expected a range"),
    ((5, 2), (2, 4), dict(S_terms=(0, 0)), ValueError, "S_terms: expected the whole range [0, 1) for a 2-D factor"),
    ((5, 2), (2, 4), dict(U_terms=[0, 1]), TypeError, "U_terms: expected None or a pair of ints (begin, end), got [0, 1]"),
    ((5, 2), (2, 4), dict(S_terms=(0, 1.0)), TypeError, "S_terms: expected None or a pair of ints"),
])
def test_bad_term_ranges(S, U, kwargs, error, fragment):
    r = S[-1] * (S[0] if len(S) == 3 else 1)
    with pytest.raises(error) as info:
        sketchcore.sketched_matmul_backward(np.ones((3, 4)), np.ones((3, 5)), np.ones(S), np.ones(U), np.ones((3, r)),
                                            **kwargs)
    assert fragment in str(info.value)


def test_a_whole_range_on_a_2d_factor_is_accepted(rng):
    x, S, U, _ = random_problem(rng, (3,), 5, 2, 4, dtype=np.float64, bias=False)
    _, z = forward(x, S, U, None, "none", 1.0, 0.0, None)
    w = rng.standard_normal((3, 4))
    full = sketchcore.sketched_matmul_backward(w, x, S, U, z)
    ranged = sketchcore.sketched_matmul_backward(w, x, S, U, z, S_terms=(0, 1), U_terms=(0, 1))
    for a, b_ in zip(full[:3], ranged[:3]):
        np.testing.assert_array_equal(a, b_)


def test_torch_tensors_give_torch_gradients(rng):
    torch = pytest.importorskip("torch")
    x, S, U, b = (torch.from_numpy(a) for a in random_problem(rng, (5,), 6, 2, 3, terms=2, dtype=np.float64))
    z = torch.empty(5, 4, dtype=torch.float64)
    sketchcore.sketched_matmul(x, S, U, bias=b, intermediate=z)
    grads = sketchcore.sketched_matmul_backward(torch.ones(5, 3, dtype=torch.float64), x, S, U, z, bias=b)
    assert all(isinstance(g, torch.Tensor) for g in grads)
    np.testing.assert_allclose(grads[3].numpy(), np.full(3, 5.0))


@pytest.mark.parametrize(("kwargs", "error", "fragment"), [
    (dict(dropout_p=0.5), ValueError, "seed: expected the forward's dropout seed, got None"),
    (dict(needs=("x", "W")), ValueError, "needs: expected names from ('x', 'S', 'U', 'bias'), got 'W'"),
    (dict(bias=None, needs=("bias",)), ValueError, "'bias' requested but bias is None"),
    (dict(grad_out=np.ones((3, 5))), ValueError, "grad_out: expected shape (3, 4), got shape (3, 5)"),
    (dict(intermediate=np.ones((3, 3))), ValueError, "intermediate: expected shape (3, 2), got shape (3, 3)"),
    (dict(intermediate=np.ones((2, 3)).T), ValueError, "intermediate: expected row-major rows"),
    (dict(grad_out=np.ones((3, 4), np.float32)), TypeError, "grad_out: expected dtype float64"),
])
def test_bad_backward_arguments(kwargs, error, fragment):
    args = dict(grad_out=np.ones((3, 4)), x=np.ones((3, 5)), S=np.ones((5, 2)), U=np.ones((2, 4)),
                intermediate=np.ones((3, 2)), bias=np.ones(4))
    args.update(kwargs)
    positional = [args.pop(k) for k in ("grad_out", "x", "S", "U", "intermediate")]
    with pytest.raises(error) as info:
        sketchcore.sketched_matmul_backward(*positional, **args)
    assert fragment in str(info.value)


def test_forward_refuses_a_bad_intermediate(rng):
    x, S, U, _ = random_problem(rng, (3,), 5, 2, 4, dtype=np.float64, bias=False)
    with pytest.raises(ValueError, match=r"intermediate: expected shape \(3, 2\), got shape \(3, 4\)"):
        sketchcore.sketched_matmul(x, S, U, intermediate=np.empty((3, 4)))
    z = np.empty((3, 2))
    z.flags.writeable = False
    with pytest.raises(ValueError, match="intermediate: expected a writable array"):
        sketchcore.sketched_matmul(x, S, U, intermediate=z)
