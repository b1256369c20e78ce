"""Fp8LowRankLinear (issue 49) where it can be checked without a GPU: its codes are sketchcore's
e4m3 encoding in torch's float8_e4m3fn dtype, its factors stay within the e4m3 rounding bound of
the float layer's, its state round trips (state_dict, restore_model, .to()), quantize_ and
sketch_model make it, and every misuse is refused by name — on the CPU, the forward itself (fp8
runs on CUDA only; tests/gpu/test_gpu_fp8.py checks it on a device)."""
import io

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from hypothesis import given, settings, strategies as st  # noqa: E402
from torch import nn  # noqa: E402

import sketchcore  # noqa: E402
from sketchcore.torch import (Fp8LowRankLinear, Int8LowRankLinear, LowRankLinear, SKLinear, quantize_,  # noqa: E402
                              restore_model, sketch_model)

E4M3_MAX = 448.0
#: The smallest positive e4m3 value (a subnormal): 2^-9.
E4M3_TINY = 2.0 ** -9


def within_e4m3_rounding(approx, exact, column_max):
    """Per element, e4m3 rounds to nearest with 3 mantissa bits: within 2^-4 of the value (normal
    range), or half the subnormal step 2^-10 in units of the column's scale max/448."""
    unit = column_max / E4M3_MAX
    bound = np.maximum(np.abs(exact) * 2.0 ** -4, unit * 2.0 ** -10) * (1 + 1e-6) + 1e-12
    return np.all(np.abs(approx - exact) <= bound)


def test_float8_e4m3fn_is_the_encoding_of_the_kernels():
    codes = np.arange(256, dtype=np.uint8)
    ours = sketchcore.e4m3_decode(codes)
    torchs = torch.from_numpy(codes).view(torch.float8_e4m3fn).float().numpy()
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(torchs))
    np.testing.assert_array_equal(ours[~np.isnan(ours)], torchs[~np.isnan(torchs)])
    values = np.random.default_rng(0).standard_normal(4096).astype(np.float32) * 100
    values = np.clip(values, -E4M3_MAX, E4M3_MAX)  # torch's cast does not saturate; ours does
    np.testing.assert_array_equal(sketchcore.e4m3_encode(values),
                                  torch.from_numpy(values).to(torch.float8_e4m3fn).view(torch.uint8).numpy())


@settings(max_examples=20, deadline=None)
@given(d_in=st.integers(1, 60), rank=st.integers(1, 20), d_out=st.integers(1, 40), bias=st.booleans(),
       seed=st.integers(0, 2 ** 31))
def test_factors_stay_within_the_e4m3_rounding_of_the_float_layer(d_in, rank, d_out, bias, seed):
    torch.manual_seed(seed)
    base = LowRankLinear(d_in, d_out, rank, bias=bias, inner_activation="silu").eval()
    layer = Fp8LowRankLinear.from_float(base)
    assert layer.S_q.dtype == torch.float8_e4m3fn and layer.S_scale.dtype == torch.float32
    assert (layer.inner_activation, layer.training) == ("silu", False)
    for approx, exact in zip(layer.dequantized_factors(), (base.S, base.U)):
        exact = exact.detach().double().numpy()
        assert within_e4m3_rounding(approx.double().numpy(), exact, np.abs(exact).max(axis=0))
    if bias:
        assert torch.equal(layer.bias, base.bias.detach())


def test_an_sklinear_becomes_one_s_u_product_of_all_its_terms():
    torch.manual_seed(1)
    base = SKLinear(48, 24, num_terms=2, low_rank=4).eval()
    layer = Fp8LowRankLinear.from_float(base)
    assert layer.rank == 16
    S, U = layer.dequantized_factors()
    dense = base.weight.detach().double().t()
    # two e4m3 roundings (2^-4 each) of every term of the product, summed in magnitude
    S0, U0 = (f.double() for f in layer.dequantized_factors())
    bound = 2 * 2.0 ** -4 * (S0.abs() @ U0.abs()) + 1e-6
    assert torch.all((S.double() @ U.double() - dense).abs() <= bound)


def test_state_dict_round_trips_and_to_keeps_codes_and_scales():
    torch.manual_seed(2)
    layer = Fp8LowRankLinear.from_float(LowRankLinear(32, 16, 8, activation="relu").eval())
    buffer = io.BytesIO()
    torch.save(layer.state_dict(), buffer)
    buffer.seek(0)
    fresh = Fp8LowRankLinear(32, 16, 8, activation="relu")
    fresh.load_state_dict(torch.load(buffer, weights_only=True))
    for name in ("S_q", "U_q"):
        assert torch.equal(getattr(fresh, name).view(torch.uint8), getattr(layer, name).view(torch.uint8))
    assert torch.equal(fresh.U_scale, layer.U_scale) and torch.equal(fresh.bias, layer.bias)
    layer.to(torch.float16).double()
    assert [b.dtype for b in layer.buffers()] == [torch.float8_e4m3fn, torch.float32, torch.float8_e4m3fn,
                                                  torch.float32, torch.float32]
    with pytest.raises(RuntimeError, match="activation='relu' \\(this layer: 'none'\\)"):
        Fp8LowRankLinear(32, 16, 8).load_state_dict(layer.state_dict())


def test_quantize_and_sketch_model_make_fp8_layers_and_restore_model_rebuilds_them():
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
    report = sketch_model(model, low_rank=8, exclude=["2"], quantize="fp8")
    assert isinstance(model[0], Fp8LowRankLinear) and isinstance(model[2], nn.Linear)
    assert report.replaced["0"].quantize == "fp8" and "LowRankLinear[fp8]" in str(report)
    fresh = restore_model(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8)), model.state_dict())
    assert isinstance(fresh[0], Fp8LowRankLinear) and fresh[0].training == model[0].training
    assert torch.equal(fresh[0].S_q.view(torch.uint8), model[0].S_q.view(torch.uint8))
    other = nn.Sequential(LowRankLinear(16, 16, 4), SKLinear(16, 8, num_terms=1, low_rank=2))
    quantize_(other, "fp8")
    assert [type(m) for m in other] == [Fp8LowRankLinear, Fp8LowRankLinear]


def test_every_misuse_is_refused_naming_what_was_expected():
    torch.manual_seed(4)
    layer = Fp8LowRankLinear.from_float(LowRankLinear(8, 4, 2))
    x = torch.randn(2, 8)
    with pytest.raises(RuntimeError, match="expected eval mode .* training through fp8 factors"):
        layer(x)
    layer.eval()
    with pytest.raises(RuntimeError, match="got an input that requires grad: training through fp8"):
        layer(x.requires_grad_())
    with torch.no_grad():
        with pytest.raises(RuntimeError, match=r"Fp8LowRankLinear: x: expected a tensor on a CUDA device .* got "
                                               r"device cpu: .* quantize to 'int8' for the CPU"):
            layer(torch.randn(2, 8))
        with pytest.raises(TypeError, match="Fp8LowRankLinear: x: expected a floating-point tensor, got torch.int64"):
            layer(torch.ones(2, 8, dtype=torch.int64))
    with pytest.raises(TypeError, match="Fp8LowRankLinear.from_float: layer: expected a LowRankLinear or SKLinear"):
        Fp8LowRankLinear.from_float(nn.Linear(8, 4))
    with pytest.raises(ValueError, match="Fp8LowRankLinear: activation: expected one of .* got 'tanh'"):
        Fp8LowRankLinear(8, 4, 2, activation="tanh")
    with pytest.raises(ValueError, match="Fp8LowRankLinear: rank"):
        Fp8LowRankLinear(8, 4, 0)
    with pytest.raises(ValueError, match="Fp8LowRankLinear.to_linear: .* σ\\(x S\\) U has no dense weight"):
        Fp8LowRankLinear(8, 4, 2, inner_activation="silu").to_linear()


def test_repr_config_and_dense_copy_describe_the_fp8_layer():
    torch.manual_seed(5)
    base = LowRankLinear(40, 12, 5, activation="gelu").eval()
    layer = Fp8LowRankLinear.from_float(base)
    assert repr(layer) == ("Fp8LowRankLinear(in_features=40, out_features=12, rank=5, bias=True, "
                           "activation='gelu', quantize='fp8')")
    assert layer.layer_config()["sketchcore"] == "Fp8LowRankLinear" and layer.layer_config()["quantize"] == "fp8"
    S, U = layer.dequantized_factors()
    dense = layer.to_linear()
    torch.testing.assert_close(dense.weight, (S @ U).t())
    assert isinstance(Int8LowRankLinear.from_float(base), Int8LowRankLinear)  # the sibling is unchanged
