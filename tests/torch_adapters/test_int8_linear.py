"""The full-rank int8 product: ``sketchcore.int8_matmul`` (the binding) and ``Int8Linear`` (the
torch layer) against a float64 reference of the documented math (x's rows quantized in float32 as
documented, exact integer sums, then float64), on hypothesis shapes; the layer's state (buffers
under .to(), packing once and again after a change, pickling, restore_model), its error against
the float layer, and every error path with its message. A moved-from factor cannot be made from
Python: tests/cpp/test_int8_matmul.cpp checks that message."""
import copy
import io
import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from hypothesis import given, settings, strategies as st  # noqa: E402
from torch import nn  # noqa: E402

import sketchcore  # noqa: E402
from _reference import activate, q8_rows  # noqa: E402
from sketchcore.torch import Int8Linear, restore_model  # noqa: E402

ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu")


def reference(x, q, col_scale, bias=None, activation="none", scale=1.0):
    """act(scale · s_x · (q8(x) @ q) · col_scale + bias) in float64, x (..., d_in)."""
    x = np.asarray(x, np.float32)
    qx, sx = q8_rows(x.reshape(-1, x.shape[-1]))
    sums = (qx @ np.asarray(q, np.int64)).astype(np.float64)
    y = scale * sums * sx.astype(np.float64)[:, None] * np.asarray(col_scale, np.float64)[None, :]
    if bias is not None:
        y = y + np.asarray(bias, np.float64)
    return activate(y, activation).reshape(x.shape[:-1] + (q.shape[1],))


def assert_matches(y, ref):
    y = np.asarray(y, np.float64)
    assert y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-5 * max(1.0, float(np.abs(ref).max(initial=0.0))))


def random_factor(rng, d_in, d_out):
    q = rng.integers(-127, 128, (d_in, d_out)).astype(np.int8)
    scale = rng.uniform(0.001, 0.02, d_out).astype(np.float32)
    return q, scale


# -- the binding ---------------------------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(lead=st.sampled_from([(0,), (1,), (5,), (2, 3), (1, 7)]), d_in=st.integers(1, 80),
       d_out=st.sampled_from([1, 3, 63, 64, 65, 130]), activation=st.sampled_from(ACTIVATIONS),
       with_bias=st.booleans(), scale=st.sampled_from([1.0, 0.5, -2.0]), pad=st.integers(0, 3),
       seed=st.integers(0, 2**32 - 1))
def test_binding_matches_the_float64_reference(lead, d_in, d_out, activation, with_bias, scale, pad, seed):
    rng = np.random.default_rng(seed)
    q, s = random_factor(rng, d_in, d_out)
    W = sketchcore.Int8Factor(q, s)
    wide = rng.standard_normal((*lead, d_in + pad)).astype(np.float32)
    x = wide[..., :d_in]  # rows d_in + pad apart: non-contiguous when pad > 0
    bias = rng.standard_normal(d_out).astype(np.float32) if with_bias else None
    y = sketchcore.int8_matmul(x, W, bias=bias, activation=activation, scale=scale)
    assert type(y) is np.ndarray and y.dtype == np.float32
    assert_matches(y, reference(x, q, s, bias, activation, scale))


def test_binding_returns_the_callers_framework_and_writes_out(rng):
    q, s = random_factor(rng, 20, 70)
    W = sketchcore.Int8Factor(q, s)
    x = torch.from_numpy(rng.standard_normal((4, 20)).astype(np.float32))
    y = sketchcore.int8_matmul(x, W, bias=torch.ones(70))
    assert isinstance(y, torch.Tensor) and y.shape == (4, 70) and y.dtype == torch.float32
    assert_matches(y.numpy(), reference(x.numpy(), q, s, np.ones(70)))
    out = np.full((4, 70), np.nan, np.float32)
    assert sketchcore.int8_matmul(x.numpy(), W, out=out) is out
    assert_matches(out, reference(x.numpy(), q, s))
    assert W.shape == (20, 70)


def test_binding_errors_name_the_argument():
    W = sketchcore.Int8Factor(np.ones((3, 2), np.int8), np.ones(2, np.float32))
    x = np.ones((4, 3), np.float32)
    with pytest.raises(ValueError, match=r"int8_matmul: W: expected d_in = 5 rows \(x.shape\[-1\]\), got shape \(3, 2\)"):
        sketchcore.int8_matmul(np.ones((4, 5), np.float32), W)
    with pytest.raises(TypeError, match="int8_matmul: x: expected dtype float32, got float64"):
        sketchcore.int8_matmul(np.ones((4, 3)), W)
    with pytest.raises(TypeError, match="int8_matmul: W: expected an Int8Factor, got ndarray"):
        sketchcore.int8_matmul(x, np.ones((3, 2), np.float32))
    with pytest.raises(ValueError, match=r"int8_matmul: bias: expected shape \(2,\), got shape \(3,\)"):
        sketchcore.int8_matmul(x, W, bias=np.ones(3, np.float32))
    with pytest.raises(TypeError, match="int8_matmul: bias: expected dtype float32, got float64"):
        sketchcore.int8_matmul(x, W, bias=np.ones(2))
    with pytest.raises(ValueError, match="int8_matmul: inner_activation: expected none .*, got 'relu'"):
        sketchcore.int8_matmul(x, W, inner_activation="relu")
    with pytest.raises(ValueError, match="int8_matmul: activation: expected one of"):
        sketchcore.int8_matmul(x, W, activation="tanh")
    with pytest.raises(ValueError, match="int8_matmul: scale: expected a finite number"):
        sketchcore.int8_matmul(x, W, scale=float("inf"))
    with pytest.raises(ValueError, match=r"int8_matmul: out: expected shape \(4, 2\)"):
        sketchcore.int8_matmul(x, W, out=np.empty((4, 3), np.float32))
    read_only = np.empty((4, 2), np.float32)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="int8_matmul: out: expected a writable array"):
        sketchcore.int8_matmul(x, W, out=read_only)


# -- the layer -----------------------------------------------------------------------------------

@settings(max_examples=25, deadline=None)
@given(lead=st.sampled_from([(0,), (1,), (6,), (2, 3)]), d_in=st.integers(1, 70),
       d_out=st.sampled_from([1, 5, 64, 100]), activation=st.sampled_from(ACTIVATIONS), with_bias=st.booleans(),
       transpose=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_layer_matches_the_float64_reference(lead, d_in, d_out, activation, with_bias, transpose, seed):
    gen = torch.Generator().manual_seed(seed)
    M = torch.randn(d_in, d_out, generator=gen, dtype=torch.float64)
    bias = torch.randn(d_out, generator=gen) if with_bias else None
    layer = Int8Linear.from_matrix(M, bias, activation=activation)
    # x's rows non-contiguous (a transposed view) or contiguous
    x = torch.randn(d_in, *lead, generator=gen).movedim(0, -1) if transpose else torch.randn(*lead, d_in, generator=gen)
    with torch.no_grad():
        y = layer(x)
    q, s = layer.W_q.numpy(), layer.W_scale.numpy()
    assert_matches(y.numpy(), reference(x.numpy(), q, s, None if bias is None else bias.numpy(), activation))
    # the stored codes are the documented per-column quantization of M
    q_ref, s_ref = sketchcore.quantize_int8(M.float().numpy())
    np.testing.assert_array_equal(q, q_ref)
    np.testing.assert_array_equal(s, s_ref)


def test_layer_error_against_the_float_layer_is_small():
    torch.manual_seed(0)
    for d_in, d_out in ((384, 384), (384, 1536), (1536, 384)):
        linear = nn.Linear(d_in, d_out).eval()
        layer = Int8Linear.from_float(linear)
        x = torch.randn(256, d_in)
        with torch.no_grad():
            y, ref = layer(x), linear(x)
        assert (torch.linalg.norm(y - ref) / torch.linalg.norm(ref)).item() < 2e-2
        assert torch.equal(layer.to_linear()(x).detach(), torch.nn.functional.linear(x, layer.dequantized_weight().t(),
                                                                                     layer.bias))


def test_from_float_keeps_mode_bias_and_dtypes():
    linear = nn.Linear(6, 4, bias=False)
    layer = Int8Linear.from_float(linear, activation="relu")
    assert layer.training and layer.bias is None and layer.activation == "relu"
    assert layer.W_q.dtype == torch.int8 and layer.W_q.shape == (6, 4)
    assert layer.W_scale.dtype == torch.float32 and layer.W_scale.shape == (4,)
    assert list(dict(layer.named_parameters())) == []
    assert repr(layer) == "Int8Linear(in_features=6, out_features=4, bias=False, activation='relu', quantize='int8')"
    assert layer.layer_config() == {"sketchcore": "Int8Linear", "in_features": 6, "out_features": 4, "bias": False,
                                    "activation": "relu", "quantize": "int8"}
    assert not Int8Linear.from_matrix(np.eye(3, dtype=np.float32)).training
    W = layer.dequantized_weight()
    torch.testing.assert_close(W, linear.weight.detach().t(), atol=float(linear.weight.detach().abs().max()) / 127, rtol=0)


def test_inputs_of_other_dtypes_are_cast_and_back(rng):
    layer = Int8Linear.from_matrix(torch.randn(16, 8), torch.randn(8))
    x = torch.randn(3, 16, dtype=torch.float64)
    with torch.no_grad():
        for dtype in (torch.float64, torch.bfloat16, torch.float16):
            y = layer(x.to(dtype))
            assert y.dtype == dtype
            torch.testing.assert_close(y.float(), layer(x.to(dtype).float()), atol=1e-2, rtol=1e-2)


def test_to_dtype_keeps_the_buffers_and_packing_follows_changes():
    layer = Int8Linear.from_matrix(torch.randn(10, 5), torch.randn(5))
    before = {k: v.clone() for k, v in layer.state_dict().items()}
    layer.to(torch.float16).double().half()
    for name, value in layer.state_dict().items():
        assert value.dtype == before[name].dtype and torch.equal(value, before[name]), name
    x = torch.randn(2, 10)
    with torch.no_grad():
        y0 = layer(x)
        packed = layer._packed_factors()
        assert layer._packed_factors() is packed  # packed once
        layer.W_q.mul_(-1)  # written in place: packed again
        assert layer._packed_factors() is not packed
        torch.testing.assert_close(layer(x) - layer.bias, -(y0 - layer.bias), rtol=1e-6, atol=1e-6)
        layer.W_scale = torch.full((5,), 0.0)  # replaced: packed again
        torch.testing.assert_close(layer(x), layer.bias.expand(2, 5))
    clone = pickle.loads(pickle.dumps(layer))
    assert clone._packed is None
    deep = copy.deepcopy(layer)
    with torch.no_grad():
        torch.testing.assert_close(deep(x), layer(x))


def test_state_dict_round_trip_through_restore_model():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(12, 20), nn.ReLU(), nn.Linear(20, 3)).eval()
    model[0] = Int8Linear.from_float(model[0], activation="gelu")
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    fresh = restore_model(nn.Sequential(nn.Linear(12, 20), nn.ReLU(), nn.Linear(20, 3)).eval(), saved)
    assert isinstance(fresh[0], Int8Linear) and not fresh[0].training and fresh[0].activation == "gelu"
    x = torch.randn(4, 12)
    with torch.no_grad():
        assert torch.equal(fresh(x), model(x))
    other = Int8Linear(12, 20, activation="relu")
    with pytest.raises(RuntimeError, match="activation='gelu' \\(this layer: 'relu'\\)"):
        other.load_state_dict(model[0].state_dict())


def test_layer_errors_name_the_problem():
    with pytest.raises(ValueError, match="Int8Linear: activation: expected one of"):
        Int8Linear(4, 4, activation="tanh")
    with pytest.raises(ValueError, match="in_features"):
        Int8Linear(0, 4)
    layer = Int8Linear.from_matrix(torch.randn(4, 3))
    with pytest.raises(ValueError, match=r"Int8Linear: x: expected shape \(\.\.\., 4\), got \(2, 5\)"):
        layer(torch.randn(2, 5))
    with pytest.raises(TypeError, match="Int8Linear: x: expected a floating-point tensor, got torch.int64"):
        layer(torch.ones(2, 4, dtype=torch.int64))
    with pytest.raises(RuntimeError, match="Int8Linear: expected an input without requires_grad"):
        layer(torch.randn(2, 4, requires_grad=True))
    with torch.no_grad():
        assert layer(torch.randn(2, 4, requires_grad=True)).shape == (2, 3)
    layer.train()
    with pytest.raises(RuntimeError, match="Int8Linear: expected eval mode"):
        layer(torch.randn(2, 4))
    with pytest.raises(TypeError, match="Int8Linear.from_float: linear: expected an nn.Linear, got Conv1d"):
        Int8Linear.from_float(nn.Conv1d(4, 4, 1))
    with pytest.raises(ValueError, match=r"Int8Linear.from_matrix: M: expected a 2-D .*, got shape \(4,\)"):
        Int8Linear.from_matrix(torch.randn(4))
    with pytest.raises(TypeError, match="Int8Linear.from_matrix: M: expected a floating-point matrix"):
        Int8Linear.from_matrix(torch.ones(4, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match="Int8Linear.from_matrix: M: expected finite values"):
        Int8Linear.from_matrix(torch.tensor([[1.0, float("nan")]]))
    with pytest.raises(ValueError, match=r"Int8Linear.from_matrix: bias: expected shape \(3,\) \(the columns of M\), "
                                         r"got \(4,\)"):
        Int8Linear.from_matrix(torch.randn(4, 3), torch.randn(4))
