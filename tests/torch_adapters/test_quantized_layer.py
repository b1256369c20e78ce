"""QuantizedLowRankLinear (issue 61 item 1): one low-rank layer whose format is a row of the formats'
table. The table's refusals name the argument and the valid formats; QuantizedLowRankLinear(format=f)
is bit for bit the named subclass of f (buffers, state_dicts, outputs, the packed factors the kernel
gets); state_dicts load across the two and restore_model rebuilds either; the fp8 road hands the
binding the layer's own codes, scales, bias and activations (checked on the CPU with the kernel
replaced by a float64 reference of the e4m3 math, since the real one runs on CUDA only)."""
import dataclasses
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from hypothesis import given, settings, strategies as st  # noqa: E402
from torch import nn  # noqa: E402

import sketchcore  # noqa: E402
from sketchcore.torch import (Fp8LowRankLinear, Int8LowRankLinear, LowRankLinear, QuantizedLowRankLinear,  # noqa: E402
                              SKLinear, quantize_, restore_model)
from sketchcore.torch.ops import _quantized_ops  # noqa: E402

ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu")
NAMED = {"int8": Int8LowRankLinear, "fp8": Fp8LowRankLinear}


def bits(t):
    """A tensor's bytes as integers, so that float8 codes compare exactly (NaN codes included)."""
    return t.view(torch.uint8) if t.element_size() == 1 else t


def same_state(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb) == ["S_q", "S_scale", "U_q", "U_scale", "bias"][:len(sa)]
    for key in sa:
        assert sa[key].dtype == sb[key].dtype and torch.equal(bits(sa[key]), bits(sb[key])), key


def float_layer(rng, d_in=24, rank=6, d_out=10, bias=True, activation="relu", inner="silu"):
    torch.manual_seed(int(rng.integers(2 ** 31)))
    return LowRankLinear(d_in, d_out, rank, bias=bias, activation=activation, inner_activation=inner).eval()


# --- the table ---------------------------------------------------------------------------------------

def test_every_row_of_the_table_makes_a_layer_of_its_codes_and_operator():
    assert tuple(_quantized_ops.FORMATS) == ("int8", "fp8")
    for name, row in _quantized_ops.FORMATS.items():
        layer = QuantizedLowRankLinear(8, 4, 2, format=name)
        assert layer.format == name and layer._quant is row and layer.code_dtype == row.code_dtype
        assert layer.S_q.dtype == layer.U_q.dtype == row.code_dtype
        assert hasattr(torch.ops.sketchcore, row.operator) and row.operator == f"{name}_sketched_linear"
        assert NAMED[name].fixed_format == name and NAMED[name](8, 4, 2)._quant is row
    assert QuantizedLowRankLinear(8, 4, 2).format == "int8"  # the default


@pytest.mark.parametrize("bad", ["int4", "INT8", "", "fp16", 8])
def test_an_unknown_format_names_the_argument_and_the_valid_ones(bad):
    expected = f"format: expected one of \\('int8', 'fp8'\\), got {bad!r}"
    with pytest.raises(ValueError, match="QuantizedLowRankLinear: " + expected):
        QuantizedLowRankLinear(8, 4, 2, format=bad)
    with pytest.raises(ValueError, match="QuantizedLowRankLinear.from_float: " + expected):
        QuantizedLowRankLinear.from_float(LowRankLinear(8, 4, 2), format=bad)
    with pytest.raises(ValueError, match="somewhere: " + expected):
        _quantized_ops.quant_format(bad, "somewhere")


def test_a_named_subclass_refuses_another_format_and_accepts_its_own():
    with pytest.raises(ValueError, match="Int8LowRankLinear: format: expected 'int8' \\(the format of "
                                         "Int8LowRankLinear\\) or None, got 'fp8': use QuantizedLowRankLinear"):
        Int8LowRankLinear(8, 4, 2, format="fp8")
    with pytest.raises(ValueError, match="Fp8LowRankLinear.from_float: format: expected 'fp8' .* got 'int8'"):
        Fp8LowRankLinear.from_float(LowRankLinear(8, 4, 2), format="int8")
    assert Fp8LowRankLinear(8, 4, 2, format="fp8").format == "fp8"
    assert type(Int8LowRankLinear.from_float(LowRankLinear(8, 4, 2), format="int8")) is Int8LowRankLinear


def test_the_binding_names_of_a_row_are_looked_up_per_call(monkeypatch):
    """A row names the binding's functions: replacing one on sketchcore reaches the layers."""
    calls = []
    quantize = sketchcore.quantize_int8
    monkeypatch.setattr(sketchcore, "quantize_int8", lambda a: calls.append(a.shape) or quantize(a))
    QuantizedLowRankLinear.from_float(LowRankLinear(8, 4, 2))
    assert calls == [(8, 2), (2, 4)]


# --- the same layer as the named subclasses ------------------------------------------------------------

@pytest.mark.filterwarnings("ignore:The sketching layer uses more parameters")
@settings(max_examples=15, deadline=None)
@given(lead=st.lists(st.integers(1, 3), max_size=2), d_in=st.integers(1, 40), rank=st.integers(1, 12),
       d_out=st.integers(1, 30), bias=st.booleans(), activation=st.sampled_from(ACTIVATIONS),
       inner=st.sampled_from(ACTIVATIONS), sk=st.booleans(), seed=st.integers(0, 2 ** 31))
def test_int8_format_is_the_int8_layer_bit_for_bit(lead, d_in, rank, d_out, bias, activation, inner, sk, seed):
    torch.manual_seed(seed)
    if sk:
        base = SKLinear(d_in, d_out, num_terms=1, low_rank=rank, bias=bias, activation=activation).eval()
    else:
        base = LowRankLinear(d_in, d_out, rank, bias=bias, activation=activation, inner_activation=inner).eval()
    ours, named = QuantizedLowRankLinear.from_float(base, format="int8"), Int8LowRankLinear.from_float(base)
    same_state(ours, named)
    x = torch.randn(*lead, d_in, dtype=torch.float64)
    with torch.no_grad():
        for dtype in (torch.float32, torch.bfloat16):
            y = ours(x.to(dtype))
            assert y.dtype == dtype and torch.equal(y, named(x.to(dtype)))


def test_int8_format_stays_near_a_float64_reference_of_its_factors(rng):
    """Per-row int8 quantization of x and of the intermediate (steps max|row|/127): a relative
    error of a few 1e-3 for Gaussian data here; 3e-2 leaves a wide margin."""
    base = float_layer(rng, 96, 16, 40, activation="none", inner="none")
    layer = QuantizedLowRankLinear.from_float(base, format="int8")
    x = torch.from_numpy(rng.standard_normal((32, 96)))
    S, U = (f.double() for f in layer.dequantized_factors())
    exact = x @ S @ U + layer.bias.double()
    with torch.no_grad():
        y = layer(x.float()).double()
    assert torch.linalg.norm(y - exact) <= 3e-2 * torch.linalg.norm(exact)


@pytest.mark.parametrize("fmt", ["int8", "fp8"])
def test_state_dicts_are_the_named_layers_and_load_across(rng, fmt):
    base = float_layer(rng)
    ours, named = QuantizedLowRankLinear.from_float(base, format=fmt), NAMED[fmt].from_float(base)
    same_state(ours, named)
    assert repr(ours) == repr(named).replace(NAMED[fmt].__name__, "QuantizedLowRankLinear")
    assert {**ours.layer_config(), "sketchcore": None} == {**named.layer_config(), "sketchcore": None}
    fresh, fresh_named = QuantizedLowRankLinear(24, 10, 6, activation="relu", inner_activation="silu", format=fmt), \
        NAMED[fmt](24, 10, 6, activation="relu", inner_activation="silu")
    fresh.load_state_dict(named.state_dict())  # the class name is a label; the configuration is checked
    fresh_named.load_state_dict(ours.state_dict())
    same_state(fresh, named)
    same_state(fresh_named, ours)
    other = "fp8" if fmt == "int8" else "int8"
    with pytest.raises(RuntimeError, match=f"quantize='{fmt}' \\(this layer: '{other}'\\)"):
        QuantizedLowRankLinear(24, 10, 6, activation="relu", inner_activation="silu",
                               format=other).load_state_dict(ours.state_dict())


@pytest.mark.parametrize("fmt", ["int8", "fp8"])
def test_restore_model_rebuilds_the_layer_in_its_format(rng, fmt):
    model = nn.Sequential(nn.Linear(24, 24), nn.ReLU(), nn.Linear(24, 10)).eval()
    model[2] = QuantizedLowRankLinear.from_float(float_layer(rng), format=fmt)
    fresh = restore_model(nn.Sequential(nn.Linear(24, 24), nn.ReLU(), nn.Linear(24, 10)).eval(), model.state_dict())
    assert type(fresh[2]) is QuantizedLowRankLinear and fresh[2].format == fmt and not fresh[2].training
    same_state(fresh[2], model[2])
    if fmt == "int8":
        x = torch.randn(5, 24)
        with torch.no_grad():
            assert torch.equal(fresh(x), model(x))


def test_quantize_makes_the_named_layers_of_each_format():
    model = nn.Sequential(LowRankLinear(16, 16, 4), SKLinear(16, 8, num_terms=1, low_rank=2))
    quantize_(model, "fp8")
    assert [type(m) for m in model] == [Fp8LowRankLinear, Fp8LowRankLinear]
    assert all(isinstance(m, QuantizedLowRankLinear) for m in model)


# --- the fp8 road on the CPU, with the kernel replaced ----------------------------------------------------

def e4m3_rows(a):
    """Per-row e4m3 quantization as the kernels do it, in float64: decoded codes times the row scale."""
    top = np.abs(a).max(axis=1, keepdims=True)
    scale = np.where(top > 0, top / 448.0, 1.0)
    codes = sketchcore.e4m3_encode((a / scale).astype(np.float32))
    return sketchcore.e4m3_decode(codes).astype(np.float64) * scale


def act64(name, v):
    return {"none": lambda: v, "relu": lambda: np.maximum(v, 0.0), "silu": lambda: v / (1.0 + np.exp(-v)),
            "gelu": lambda: 0.5 * v * (1.0 + np.vectorize(math.erf)(v / math.sqrt(2.0))),
            "gelu_tanh": lambda: 0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3)))}[name]()


def fp8_reference(x, S, U, *, bias=None, activation="none", inner_activation=None):
    """sketchcore.fp8_sketched_matmul's math in float64, from the packed factors it is given."""
    def value(f):
        return sketchcore.e4m3_decode(f.codes).astype(np.float64) * f.scale.astype(np.float64)
    rows = x.reshape(-1, x.shape[-1]).double().numpy()
    z = act64(inner_activation or "none", e4m3_rows(rows) @ value(S))
    y = e4m3_rows(z) @ value(U) + (0.0 if bias is None else bias.double().numpy())
    return torch.from_numpy(act64(activation, y)).float().reshape(*x.shape[:-1], -1)


@pytest.fixture
def fp8_on_cpu(monkeypatch):
    """The fp8 row with the CPU among its devices and the kernel a float64 reference: the layer's
    road to the binding, without a GPU. Yields the kernel's calls."""
    calls = []
    row = dataclasses.replace(_quantized_ops.FORMATS["fp8"], devices=("cpu", "cuda"))
    monkeypatch.setitem(_quantized_ops.FORMATS, "fp8", row)
    monkeypatch.setattr(sketchcore, "fp8_sketched_matmul", lambda x, S, U, **k: calls.append((x, S, U, k))
                        or fp8_reference(x, S, U, **k))
    yield calls


@pytest.mark.parametrize("activation,inner,bias", [("gelu", "silu", True), ("none", "none", False)])
def test_fp8_format_hands_the_kernel_the_layers_codes_and_options(rng, fp8_on_cpu, activation, inner, bias):
    base = float_layer(rng, 40, 8, 12, bias=bias, activation=activation, inner=inner)
    ours, named = QuantizedLowRankLinear.from_float(base, format="fp8"), Fp8LowRankLinear.from_float(base)
    x = torch.from_numpy(rng.standard_normal((2, 3, 40)).astype(np.float32))
    with torch.no_grad():
        y, y_named = ours(x), named(x)
    assert torch.equal(y, y_named) and y.shape == (2, 3, 12)
    (seen, S, U, options), _ = fp8_on_cpu
    assert seen is x and options == {"bias": ours.bias, "activation": activation,
                                     "inner_activation": None if inner == "none" else inner}
    for factor, codes, scale in ((S, ours.S_q, ours.S_scale), (U, ours.U_q, ours.U_scale)):
        assert np.array_equal(factor.codes, codes.view(torch.uint8).numpy())
        assert np.array_equal(factor.scale, scale.numpy())
    # against the float64 map of the dequantized factors: e4m3 rounds x and the intermediate by up
    # to 2^-4 each (3 mantissa bits), through activations of Lipschitz constant ≤ 1.13
    S64, U64 = (f.double().numpy() for f in ours.dequantized_factors())
    rows = x.double().reshape(6, 40).numpy()
    exact = act64(activation, act64(inner, rows @ S64) @ U64 + (ours.bias.double().numpy() if bias else 0.0))
    assert np.linalg.norm(y.reshape(6, 12).double().numpy() - exact) <= 0.2 * np.linalg.norm(exact)
