"""The inner (bottleneck) activation of sketched_matmul: y = act(scale · Σ_t σ(x S_t) U_t + bias)
(CoLA-style layers), forward and backward against float64 references written here, the
intermediate it saves (the pre-activation only), 16-bit operands and the error paths."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import sketchcore
from _reference import ACTIVATIONS, activate, relative_error

_TORCH_ACT = {
    "none": lambda z: z,
    "relu": torch.relu,
    "gelu": torch.nn.functional.gelu,
    "gelu_tanh": lambda z: torch.nn.functional.gelu(z, approximate="tanh"),
    "silu": torch.nn.functional.silu,
}


def _packed(S, U):
    """[S_1 … S_T] and [U_1; …; U_T] of 2-D or 3-D factors."""
    if S.ndim == 2:
        return S, U
    return np.concatenate(list(S), axis=1), np.concatenate(list(U), axis=0)


def forward_reference(x, S, U, bias, activation, inner, scale):
    """act(scale · Σ_t σ(x S_t) U_t + bias) in float64, term by term."""
    x, S, U = (np.asarray(a, np.float64) for a in (x, S, U))
    S3, U3 = (S[None], U[None]) if S.ndim == 2 else (S, U)
    h = sum(activate(x @ S3[t], inner) @ U3[t] for t in range(S3.shape[0]))
    h = scale * h
    if bias is not None:
        h = h + np.asarray(bias, np.float64)
    return activate(h, activation)


def gradient_reference(grad, x, S, U, bias, activation, inner, scale):
    """(dx, dS, dU, dbias) by torch's float64 autograd of the composite written with torch's own
    activations (independent of sketchcore's formulas)."""
    t = [torch.tensor(np.asarray(a, np.float64), requires_grad=True) for a in (x, S, U)]
    tb = None if bias is None else torch.tensor(np.asarray(bias, np.float64), requires_grad=True)
    xt, St, Ut = t
    S3, U3 = (St[None], Ut[None]) if St.dim() == 2 else (St, Ut)
    h = sum(_TORCH_ACT[inner](xt @ S3[i]) @ U3[i] for i in range(S3.shape[0])) * scale
    if tb is not None:
        h = h + tb
    y = _TORCH_ACT[activation](h)
    wanted = t + ([tb] if tb is not None else [])
    grads = torch.autograd.grad(y, wanted, torch.tensor(np.asarray(grad, np.float64)))
    out = [g.numpy() for g in grads]
    return (*out, None) if tb is None else tuple(out)


def _operands(rng, lead, d_in, k, d_out, terms, dtype, with_bias):
    x = rng.standard_normal((*lead, d_in)).astype(dtype)
    s_shape, u_shape = ((d_in, k), (k, d_out)) if terms is None else ((terms, d_in, k), (terms, k, d_out))
    S = (rng.standard_normal(s_shape) / np.sqrt(d_in)).astype(dtype)
    U = (rng.standard_normal(u_shape) / np.sqrt(k)).astype(dtype)
    bias = rng.standard_normal(d_out).astype(dtype) if with_bias else None
    return x, S, U, bias


@pytest.mark.parametrize("inner", ACTIVATIONS)
@pytest.mark.parametrize("terms", [None, 3])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_forward_and_backward_match_float64_references(inner, terms, with_bias, dtype):
    rng = np.random.default_rng(abs(hash((inner, terms, with_bias, str(dtype)))) % 2**32)
    x, S, U, bias = _operands(rng, (4, 9), 23, 7, 13, terms, dtype, with_bias)  # odd rank 7, T·k = 21
    activation = "gelu" if with_bias else "none"
    r = 7 * (terms or 1)
    z = np.empty((4, 9, r), dtype)
    y = sketchcore.sketched_matmul(x, S, U, bias=bias, activation=activation, scale=0.7, intermediate=z,
                                   inner_activation=inner)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    assert relative_error(y, forward_reference(x, S, U, bias, activation, inner, 0.7)) < tol
    # The saved intermediate is the pre-activation x·[S_1 … S_T], not σ of it.
    Sp, _ = _packed(S, U)
    assert relative_error(z, x.astype(np.float64) @ Sp.astype(np.float64)) < tol
    grad = rng.standard_normal(y.shape).astype(dtype)
    got = sketchcore.sketched_matmul_backward(grad, x, S, U, z, bias=bias, activation=activation, scale=0.7,
                                              inner_activation=inner)
    want = gradient_reference(grad, x, S, U, bias, activation, inner, 0.7)
    for name, g, w in zip(("x", "S", "U", "bias"), got, want):
        if w is None:
            assert g is None
            continue
        assert relative_error(g, w) < (5e-5 if dtype == np.float32 else 1e-11), name


@pytest.mark.parametrize("inner", ["silu", "gelu"])
def test_without_intermediate_the_forward_is_the_same(inner):
    """The inference call (no intermediate to save: σ applied in place) equals the training call."""
    rng = np.random.default_rng(3)
    x, S, U, bias = _operands(rng, (3000,), 40, 5, 17, 2, np.float32, True)  # several row chunks
    y_inference = sketchcore.sketched_matmul(x, S, U, bias=bias, inner_activation=inner)
    y_training = sketchcore.sketched_matmul(x, S, U, bias=bias, inner_activation=inner,
                                            intermediate=np.empty((3000, 10), np.float32))
    np.testing.assert_array_equal(y_inference, y_training)
    assert relative_error(y_inference, forward_reference(x, S, U, bias, "none", inner, 1.0)) < 1e-5


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(0, 70), d_in=st.integers(1, 30), k=st.integers(1, 9), d_out=st.integers(1, 25),
       terms=st.sampled_from([None, 1, 2, 4]), inner=st.sampled_from(ACTIVATIONS), seed=st.integers(0, 2**31))
def test_shapes_against_the_reference(rows, d_in, k, d_out, terms, inner, seed):
    rng = np.random.default_rng(seed)
    x, S, U, bias = _operands(rng, (rows,), d_in, k, d_out, terms, np.float64, True)
    z = np.empty((rows, k * (terms or 1)))
    y = sketchcore.sketched_matmul(x, S, U, bias=bias, intermediate=z, inner_activation=inner)
    np.testing.assert_allclose(y, forward_reference(x, S, U, bias, "none", inner, 1.0), rtol=1e-11, atol=1e-11)
    grad = rng.standard_normal(y.shape)
    got = sketchcore.sketched_matmul_backward(grad, x, S, U, z, bias=bias, inner_activation=inner)
    for g, w in zip(got, gradient_reference(grad, x, S, U, bias, "none", inner, 1.0)):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("inner", ["silu", "gelu_tanh", "relu"])
def test_16_bit_operands(dtype, inner):
    rng = np.random.default_rng(11)
    x, S, U, bias = _operands(rng, (300,), 64, 19, 48, 2, np.float32, True)
    xt, St, Ut, bt = (torch.from_numpy(a).to(dtype) for a in (x, S, U, bias))
    z = torch.empty(300, 38, dtype=dtype)
    y = sketchcore.sketched_matmul(xt, St, Ut, bias=bt, activation="silu", intermediate=z, inner_activation=inner)
    ops = [a.float().numpy() for a in (xt, St, Ut, bt)]  # the rounded operands, in float64 below
    assert relative_error(y.float().numpy(), forward_reference(*ops, "silu", inner, 1.0)) < 1e-2
    grad = torch.from_numpy(rng.standard_normal((300, 48)).astype(np.float32)).to(dtype)
    got = sketchcore.sketched_matmul_backward(grad, xt, St, Ut, z, bias=bt, activation="silu", inner_activation=inner)
    want = gradient_reference(grad.float().numpy(), *ops, "silu", inner, 1.0)
    for g, w in zip(got, want):
        assert g.dtype == dtype
        assert relative_error(g.float().numpy(), w) < 2e-2


def test_unknown_inner_activation_names_the_valid_ones():
    x, S, U = np.ones((2, 3)), np.ones((3, 2)), np.ones((2, 4))
    with pytest.raises(ValueError, match=r"sketched_matmul: inner_activation: expected one of "
                                         r"\('none', 'relu', 'gelu', 'gelu_tanh', 'silu'\), got 'tanh'"):
        sketchcore.sketched_matmul(x, S, U, inner_activation="tanh")
    with pytest.raises(TypeError, match="inner_activation: expected a str"):
        sketchcore.sketched_matmul(x, S, U, inner_activation=1)
    with pytest.raises(ValueError, match=r"sketched_matmul_backward: inner_activation: expected one of .*got 'swish'"):
        sketchcore.sketched_matmul_backward(np.ones((2, 4)), x, S, U, np.ones((2, 2)), inner_activation="swish")


def test_inner_activation_none_and_None_are_the_plain_product():
    rng = np.random.default_rng(5)
    x, S, U, bias = _operands(rng, (8,), 6, 3, 5, None, np.float64, True)
    plain = sketchcore.sketched_matmul(x, S, U, bias=bias)
    np.testing.assert_array_equal(sketchcore.sketched_matmul(x, S, U, bias=bias, inner_activation=None), plain)
    np.testing.assert_array_equal(sketchcore.sketched_matmul(x, S, U, bias=bias, inner_activation="none"), plain)
