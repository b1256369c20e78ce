"""Int8LowRankLinear (issue 49): the layer against an independent float64 reference of the
quantized math, against the float LowRankLinear/SKLinear within a bound derived from the
quantization steps, its state (state_dict, .to(), packing once), its inputs and its errors."""
import io
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from hypothesis import given, settings, strategies as st  # noqa: E402
from torch import nn  # noqa: E402

import sketchcore  # noqa: E402
from sketchcore.torch import Int8LowRankLinear, LowRankLinear, SKLinear  # noqa: E402

ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu")
#: Lipschitz constants of the activations (the bound's error propagation through them)
LIPSCHITZ = {"none": 1.0, "relu": 1.0, "gelu": 1.13, "gelu_tanh": 1.13, "silu": 1.1}


def act64(name, v):
    if name == "relu":
        return np.maximum(v, 0.0)
    if name == "gelu":
        return 0.5 * v * (1.0 + np.vectorize(math.erf)(v / math.sqrt(2.0)))
    if name == "gelu_tanh":
        return 0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3)))
    if name == "silu":
        return v / (1.0 + np.exp(-v))
    return v


def q8_rows(a):
    """Symmetric per-row int8 quantization in float64: (q, scale) with a = q * scale ± scale/2."""
    top = np.abs(a).max(axis=1, keepdims=True)
    scale = np.where(top > 0, top / 127.0, 1.0)
    return np.clip(np.rint(a / scale), -127, 127), scale


def reference(layer, x):
    """The quantized layer's math in float64 from its int8 buffers; returns (y, intermediate scales)."""
    x = x.reshape(-1, layer.in_features).double().numpy()
    S = layer.S_q.double().numpy() * layer.S_scale.double().numpy()
    U = layer.U_q.double().numpy() * layer.U_scale.double().numpy()
    qx, sx = q8_rows(x)
    g = act64(layer.inner_activation, (qx * sx) @ S)
    qg, sg = q8_rows(g)
    y = (qg * sg) @ U + (0.0 if layer.bias is None else layer.bias.double().numpy())
    return act64(layer.activation, y), sg, U


def flip_tolerance(y, sg, U):
    """Where the kernel's float32 scale arithmetic and the float64 reference round a value at a
    half-step differently, an int8 code moves by one: a few steps of the intermediate (sg per
    row) through U, and float32 rounding."""
    return np.broadcast_to(4 * sg * np.abs(U).max() + 1e-5 * np.abs(y).max() + 1e-6, y.shape)


def quantized_layer(rng, d_in, rank, d_out, bias=True, activation=None, inner=None):
    torch.manual_seed(int(rng.integers(2 ** 31)))
    base = LowRankLinear(d_in, d_out, rank, bias=bias, activation=activation, inner_activation=inner).eval()
    return base, Int8LowRankLinear.from_float(base)


@settings(max_examples=30, deadline=None)
@given(lead=st.lists(st.integers(1, 4), min_size=0, max_size=2), d_in=st.integers(1, 70), rank=st.integers(1, 40),
       d_out=st.integers(1, 50), bias=st.booleans(), activation=st.sampled_from(ACTIVATIONS),
       inner=st.sampled_from(ACTIVATIONS), seed=st.integers(0, 2 ** 31))
def test_matches_a_float64_reference_of_the_quantized_math(lead, d_in, rank, d_out, bias, activation, inner, seed):
    rng = np.random.default_rng(seed)
    _, layer = quantized_layer(rng, d_in, rank, d_out, bias, activation, inner)
    x = torch.from_numpy(rng.standard_normal((*lead, d_in)).astype(np.float32))
    with torch.no_grad():
        y = layer.eval()(x)
    assert y.shape == (*lead, d_out) and y.dtype == torch.float32
    expected, sg, U = reference(layer, x)
    np.testing.assert_array_less(np.abs(y.reshape(-1, d_out).double().numpy() - expected),
                                 flip_tolerance(expected, sg, U))


def quantization_bound(x, S, U, bias, activation, inner):
    """An elementwise bound on |int8 layer − float layer| from the quantization steps alone (float64):
    x and the intermediate are rounded per row to half a step (scale/2), S and U per column."""
    sx = np.abs(x).max(1, keepdims=True) / 127 / 2
    sS = np.abs(S).max(0, keepdims=True) / 127 / 2
    sU = np.abs(U).max(0, keepdims=True) / 127 / 2
    h = x @ S
    e_h = sx * np.abs(S).sum(0) + np.abs(x).sum(1, keepdims=True) * sS + S.shape[0] * sx * sS
    g = act64(inner, h)
    e_g = LIPSCHITZ[inner] * e_h
    e_g = e_g + (np.abs(g) + e_g).max(1, keepdims=True) / 127 / 2  # the intermediate's own rounding
    e_y = e_g @ np.abs(U) + np.abs(g) @ (np.ones_like(U) * sU) + e_g @ (np.ones_like(U) * sU)
    return np.broadcast_to(LIPSCHITZ[activation] * e_y * (1 + 1e-5) + 1e-5 * np.abs(h @ U + bias).max(), h.shape[:1] + U.shape[1:])


@pytest.mark.parametrize("activation,inner", [("none", "none"), ("gelu", "none"), ("none", "silu"), ("relu", "relu")])
def test_stays_within_the_quantization_bound_of_the_float_layer(rng, activation, inner):
    base, layer = quantized_layer(rng, 96, 24, 40, True, activation, inner)
    x = torch.from_numpy(rng.standard_normal((3, 7, 96)).astype(np.float32))
    with torch.no_grad():
        error = (layer.eval()(x) - base(x)).reshape(-1, 40).double().numpy()
    bound = quantization_bound(x.reshape(-1, 96).double().numpy(), base.S.detach().double().numpy(),
                               base.U.detach().double().numpy(), base.bias.detach().double().numpy(), activation, inner)
    np.testing.assert_array_less(np.abs(error), bound)
    assert np.abs(error).max() > 0  # the int8 path really ran, not the float one


def test_an_sklinear_becomes_one_s_u_product_of_all_its_terms(rng):
    torch.manual_seed(int(rng.integers(2 ** 31)))
    sk = SKLinear(96, 64, num_terms=2, low_rank=4, activation="relu").eval()
    layer = Int8LowRankLinear.from_float(sk)
    assert layer.rank == 2 * 2 * 4 and layer.activation == "relu"
    x = torch.from_numpy(rng.standard_normal((9, 96)).astype(np.float32))
    from sketchcore.torch.layers._quantized import float_factors
    S, U = (f.double().numpy() for f in float_factors(sk))
    bias = sk.bias.detach().double().numpy()
    with torch.no_grad():
        np.testing.assert_allclose(np.maximum(x.double().numpy() @ S @ U + bias, 0), sk(x).double().numpy(),
                                   rtol=1e-4, atol=1e-5)
        error = np.abs(layer.eval()(x).double().numpy() - sk(x).double().numpy())
    np.testing.assert_array_less(error, quantization_bound(x.double().numpy(), S, U, bias, "relu", "none"))
    assert error.max() > 0


def test_state_dict_round_trips_into_a_fresh_layer_through_torch_save(rng):
    _, layer = quantized_layer(rng, 32, 8, 16, activation="silu")
    buffer = io.BytesIO()
    torch.save(layer.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    assert {k: v.dtype for k, v in state.items()} == {"S_q": torch.int8, "S_scale": torch.float32, "U_q": torch.int8,
                                                       "U_scale": torch.float32, "bias": torch.float32}
    fresh = Int8LowRankLinear(32, 16, 8, activation="silu").eval()
    x = torch.from_numpy(rng.standard_normal((5, 32)).astype(np.float32))
    with torch.no_grad():
        before = fresh(x)  # packs the empty factors: loading must repack
        fresh.load_state_dict(state)
        assert torch.equal(fresh(x), layer.eval()(x)) and not torch.equal(before, fresh(x))
    with pytest.raises(RuntimeError, match="activation='silu' \\(this layer: 'none'\\)"):
        Int8LowRankLinear(32, 16, 8).load_state_dict(state)


def test_to_moves_but_keeps_int8_and_float32_and_the_output_follows_the_input_dtype(rng):
    _, layer = quantized_layer(rng, 24, 6, 10)
    layer.eval()
    x = torch.from_numpy(rng.standard_normal((4, 24)).astype(np.float32))
    with torch.no_grad():
        y32 = layer(x)
        layer.to(torch.float16).double()
        assert [b.dtype for b in layer.buffers()] == [torch.int8, torch.float32, torch.int8, torch.float32,
                                                      torch.float32]
        assert torch.equal(layer(x), y32)
        for dtype in (torch.float64, torch.bfloat16):  # cast in, compute in float32, cast out
            y = layer(x.to(dtype))
            assert y.dtype == dtype and torch.equal(y, layer(x.to(dtype).float()).to(dtype))


def test_forward_hands_the_input_to_the_kernel_without_a_copy_and_packs_once(rng, monkeypatch):
    _, layer = quantized_layer(rng, 16, 4, 8)
    layer.eval()
    seen, packed = [], []
    kernel, factor = sketchcore.int8_sketched_matmul, sketchcore.Int8Factor
    monkeypatch.setattr(sketchcore, "int8_sketched_matmul", lambda x, *a, **k: seen.append(x) or kernel(x, *a, **k))
    monkeypatch.setattr(sketchcore, "Int8Factor", lambda *a: packed.append(a) or factor(*a))
    x = torch.randn(3, 16)
    with torch.inference_mode():
        layer(x), layer(x), layer(x)
    assert all(t is x for t in seen) and len(seen) == 3 and len(packed) == 2  # S and U, once
    with torch.no_grad():
        layer.U_scale.mul_(2)  # a write to a buffer repacks
        layer(x)
    assert len(packed) == 4


def test_training_through_int8_factors_is_refused_with_a_clear_error(rng):
    _, layer = quantized_layer(rng, 8, 2, 4)
    x = torch.randn(2, 8)
    with pytest.raises(RuntimeError, match="expected eval mode .* got training mode: training through int8"):
        layer.train()(x)
    layer.eval()
    with pytest.raises(RuntimeError, match="got an input that requires grad: training through int8"):
        layer(x.requires_grad_())
    with torch.no_grad():
        assert layer(x).shape == (2, 4)  # the same input without grad mode runs
    assert list(layer.parameters()) == []


def test_every_wrong_input_or_layer_is_refused_naming_what_was_expected(rng):
    _, layer = quantized_layer(rng, 8, 2, 4)
    layer.eval()
    with torch.no_grad():
        with pytest.raises(TypeError, match="x: expected a floating-point tensor, got torch.int64"):
            layer(torch.ones(2, 8, dtype=torch.int64))
        with pytest.raises(ValueError, match=r"x: expected shape \(\.\.\., 8\), got \(2, 9\)"):
            layer(torch.ones(2, 9))
        with pytest.raises(RuntimeError, match="x: expected a tensor on the layer's device cpu, got device meta"):
            layer(torch.ones(2, 8, device="meta"))
    with pytest.raises(TypeError, match="expected a LowRankLinear or SKLinear, got Linear"):
        Int8LowRankLinear.from_float(nn.Linear(8, 4))
    with pytest.raises(ValueError, match="activation: expected one of .* got 'tanh'"):
        Int8LowRankLinear(8, 4, 2, activation="tanh")
    with pytest.raises(ValueError, match="rank"):
        Int8LowRankLinear(8, 4, 0)
    _, inner = quantized_layer(rng, 8, 2, 4, inner="silu")
    with pytest.raises(ValueError, match="inner_activation='silu': σ\\(x S\\) U has no dense weight"):
        inner.to_linear()


def test_repr_dense_copy_and_dequantized_factors_describe_the_int8_layer(rng):
    base, layer = quantized_layer(rng, 40, 5, 12, activation="gelu")
    assert repr(layer) == ("Int8LowRankLinear(in_features=40, out_features=12, rank=5, bias=True, "
                           "activation='gelu', quantize='int8')")
    S, U = layer.dequantized_factors()
    S0, U0 = base.S.detach(), base.U.detach()
    # per column, the rounding error is at most half a step of that column's scale
    assert torch.all((S - S0).abs() <= S0.abs().amax(0) / 254 * (1 + 1e-6))
    assert torch.all((U - U0).abs() <= U0.abs().amax(0) / 254 * (1 + 1e-6))
    dense = layer.to_linear()
    torch.testing.assert_close(dense.weight, (S @ U).t())
    torch.testing.assert_close(dense.bias, base.bias.detach())
