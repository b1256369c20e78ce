"""Correctness of sketched_matmul against a float64 reference on fresh random data."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sketchcore
from _reference import ACTIVATIONS, assert_close, random_problem, reference


@st.composite
def problems(draw):
    lead = draw(st.lists(st.integers(0, 4), min_size=0, max_size=3))
    d_in = draw(st.integers(1, 48))
    k = draw(st.integers(1, 9))
    d_out = draw(st.integers(1, 33))
    terms = draw(st.one_of(st.none(), st.integers(1, 4)))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    activation = draw(st.sampled_from(ACTIVATIONS))
    with_bias = draw(st.booleans())
    # The scale is applied in the compute dtype: keep it clear of float32 underflow.
    scale = draw(st.floats(-2.0, 2.0).filter(lambda v: v == 0.0 or abs(v) > 1e-6))
    seed = draw(st.integers(0, 2**63 - 1))
    return lead, d_in, k, d_out, terms, dtype, activation, with_bias, scale, seed


@settings(max_examples=150, deadline=None)
@given(problems())
def test_matches_float64_reference_for_any_shape(problem):
    lead, d_in, k, d_out, terms, dtype, activation, with_bias, scale, seed = problem
    x, S, U, b = random_problem(np.random.default_rng(seed), lead, d_in, k, d_out, terms, dtype, with_bias)
    y = sketchcore.sketched_matmul(x, S, U, bias=b, activation=activation, scale=scale)
    assert type(y) is np.ndarray
    assert y.dtype == dtype
    assert y.shape == (*lead, d_out)
    magnitude = reference(abs(x), abs(S), abs(U), None if b is None else abs(b), "none", abs(scale))
    assert_close(y, reference(x, S, U, b, activation, scale), dtype, magnitude=magnitude)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("with_bias", [False, True])
def test_every_activation_with_and_without_bias(rng, dtype, activation, with_bias):
    x, S, U, b = random_problem(rng, (37,), 65, 6, 29, terms=3, dtype=dtype, bias=with_bias)
    y = sketchcore.sketched_matmul(x, S, U, bias=b, activation=activation, scale=1.7)
    assert_close(y, reference(x, S, U, b, activation, 1.7), dtype)


def test_activations_at_extreme_inputs():
    # One term, identity sketch: the activation sees exactly z.
    z = np.array([[-1e4, -100.0, -20.0, -1e-8, 0.0, 1e-8, 20.0, 100.0, 1e4]])
    eye = np.eye(z.shape[1])
    for activation in ACTIVATIONS:
        y = sketchcore.sketched_matmul(z, eye, eye, activation=activation)
        np.testing.assert_allclose(y, reference(z, eye, eye, None, activation), rtol=1e-12, atol=1e-300,
                                   err_msg=activation)
        assert np.all(np.isfinite(y)), activation


def test_relu_propagates_nan_like_numpy():
    # NaN enters through the bias (through the GEMM it would spread to every column).
    z = np.array([np.nan, -1.0, 2.0])
    y = sketchcore.sketched_matmul(np.zeros((2, 3)), np.eye(3), np.eye(3), bias=z, activation="relu")
    np.testing.assert_array_equal(y, np.maximum(np.broadcast_to(z, (2, 3)), 0))


def test_terms_equal_the_packed_two_dimensional_form(rng):
    x, S, U, _ = random_problem(rng, (20,), 30, 4, 12, terms=5, dtype=np.float64, bias=False)
    packed_S = S.transpose(1, 0, 2).reshape(30, 20)
    packed_U = U.reshape(20, 12)
    np.testing.assert_allclose(sketchcore.sketched_matmul(x, S, U),
                               sketchcore.sketched_matmul(x, packed_S, packed_U), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("lead", [(0,), (0, 5), (5, 0), (3, 0, 2)])
def test_zero_size_batch_returns_empty_result(rng, lead):
    x, S, U, b = random_problem(rng, lead, 8, 3, 5, terms=2, dtype=np.float32)
    y = sketchcore.sketched_matmul(x, S, U, bias=b, activation="gelu")
    assert y.shape == (*lead, 5) and y.dtype == np.float32


def test_one_dimensional_x_gives_one_dimensional_result(rng):
    x, S, U, b = random_problem(rng, (), 16, 4, 7, dtype=np.float64)
    y = sketchcore.sketched_matmul(x, S, U, bias=b)
    assert y.shape == (7,)
    assert_close(y, reference(x, S, U, b), np.float64)


@pytest.mark.parametrize("shapes", [
    ((4, 0), (0, 3), (3, 5)),          # d_in = 0
    ((4, 6), (6, 0), (0, 5)),          # k = 0
    ((4, 6), (0, 6, 3), (0, 3, 5)),    # T = 0
])
def test_empty_sum_gives_activation_of_bias(rng, shapes):
    xs, ss, us = shapes
    x, S, U = (rng.standard_normal(s) for s in shapes)
    b = rng.standard_normal(us[-1])
    y = sketchcore.sketched_matmul(x, S, U, bias=b, activation="silu")
    np.testing.assert_allclose(y, np.broadcast_to(reference(np.zeros((1, 1)), np.zeros((1, 1)),
                                                            np.zeros((1, us[-1])), b, "silu"), y.shape))


def test_scale_zero_and_negative(rng):
    x, S, U, b = random_problem(rng, (9,), 10, 2, 4, dtype=np.float64)
    np.testing.assert_array_equal(sketchcore.sketched_matmul(x, S, U, scale=0.0), np.zeros((9, 4)))
    assert_close(sketchcore.sketched_matmul(x, S, U, bias=b, scale=-3.0), reference(x, S, U, b, scale=-3.0),
                 np.float64)


def test_activation_none_is_accepted_as_python_none(rng):
    x, S, U, b = random_problem(rng, (3,), 5, 2, 4, dtype=np.float64)
    np.testing.assert_array_equal(sketchcore.sketched_matmul(x, S, U, activation=None),
                                  sketchcore.sketched_matmul(x, S, U, activation="none"))


def test_results_do_not_depend_on_thread_count(rng):
    x, S, U, b = random_problem(rng, (300,), 257, 16, 300, terms=3, dtype=np.float64)
    before = sketchcore.get_num_threads()
    try:
        sketchcore.set_num_threads(1)
        one = sketchcore.sketched_matmul(x, S, U, bias=b, activation="gelu")
        sketchcore.set_num_threads(2)
        two = sketchcore.sketched_matmul(x, S, U, bias=b, activation="gelu")
    finally:
        sketchcore.set_num_threads(before)
    np.testing.assert_allclose(one, two, rtol=1e-13, atol=1e-13)
    assert_close(one, reference(x, S, U, b, "gelu"), np.float64)


def test_large_problem_uses_the_parallel_epilogue_correctly(rng):
    # Big enough that the epilogue, packing and scatter are split across threads.
    x, S, U, b = random_problem(rng, (2, 300), 130, 8, 700, terms=4, dtype=np.float32)
    x = x[:, ::-1]  # negative row stride: packed in parallel
    out_buffer = np.zeros((2, 300, 1400), np.float32)
    out = out_buffer[..., ::2]  # strided out: scattered in parallel
    sketchcore.sketched_matmul(x, S, U, bias=b, activation="silu", out=out)
    assert_close(out, reference(x, S, U, b, "silu"), np.float32)
    assert not out_buffer[..., 1::2].any(), "wrote between the columns of out"
