"""SKConv2d and sketched_conv2d: Panther's formula (conv2d with S1s, then the 1×1 combination
with U1s divided by 2T, plus bias) in float64 as the reference, forward and backward over
hypothesis-drawn geometries; gradcheck; memory formats; conversions (SVD optimal, Panther's
error); state_dict, restore_model, sketch_model(conv2d=True); torch.compile; every refusal."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from sketchcore.torch import SKConv2d, restore_model, sketch_model, sketched_conv2d  # noqa: E402


def panther_reference(x, S1s, U1s, bias, stride, padding, dilation):
    """Panther's sketched_conv2d_forward, transcribed (dilation added), in the inputs' dtype."""
    L, K, out = U1s.shape
    temp = F.conv2d(x, S1s, stride=stride, padding=padding, dilation=dilation)
    n, _, h, w = temp.shape
    y = torch.einsum("blkhw,lko->bohw", temp.view(n, L, K, h, w), U1s) / L
    return y if bias is None else y + bias.view(1, -1, 1, 1)


def relative_error(a, b):
    """‖a − b‖ / ‖b‖ (0 when both are zero: outputs that see only padding)."""
    return torch.linalg.norm((a - b).double()).item() / max(torch.linalg.norm(b.double()).item(), 1e-300)


geometry = st.fixed_dictionaries({
    "n": st.integers(1, 3), "c": st.integers(1, 5), "out": st.integers(1, 7), "terms": st.integers(1, 3),
    "k": st.integers(1, 4), "kh": st.integers(1, 3), "kw": st.integers(1, 3), "stride": st.integers(1, 2),
    "padding": st.integers(0, 2), "dilation": st.integers(1, 2), "extra_h": st.integers(0, 6),
    "extra_w": st.integers(0, 6), "bias": st.booleans()})


def draw(g, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    L = 2 * g["terms"]
    h = max(1, g["dilation"] * (g["kh"] - 1) + 1 - 2 * g["padding"]) + g["extra_h"]
    w = max(1, g["dilation"] * (g["kw"] - 1) + 1 - 2 * g["padding"]) + g["extra_w"]
    x = torch.randn(g["n"], g["c"], h, w, generator=gen, dtype=torch.float64)
    S1s = torch.randn(L * g["k"], g["c"], g["kh"], g["kw"], generator=gen, dtype=torch.float64)
    U1s = torch.randn(L, g["k"], g["out"], generator=gen, dtype=torch.float64)
    b = torch.randn(g["out"], generator=gen, dtype=torch.float64) if g["bias"] else None
    return [t if t is None else t.to(dtype) for t in (x, S1s, U1s, b)]


@settings(max_examples=60, deadline=None)
@given(geometry)
def test_forward_and_backward_match_panthers_formula_in_float64(g):
    x, S1s, U1s, b = draw(g)
    args = {"stride": g["stride"], "padding": g["padding"], "dilation": g["dilation"]}
    leaves = [t.requires_grad_() for t in (x, S1s, b) if t is not None]
    y = sketched_conv2d(x, S1s, U1s, b, **args)
    expected = panther_reference(x, S1s, U1s, b, **args)
    assert y.shape == expected.shape and y.is_contiguous()
    assert relative_error(y, expected) <= 1e-12
    weights = torch.randn(expected.shape, dtype=torch.float64)
    got = torch.autograd.grad((y * weights).sum(), leaves)
    want = torch.autograd.grad((expected * weights).sum(), leaves)
    for a, e in zip(got, want):
        assert relative_error(a, e) <= 1e-12


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reduced_precision_keeps_its_tolerance(dtype):
    g = {"n": 2, "c": 8, "out": 16, "terms": 2, "k": 4, "kh": 3, "kw": 3, "stride": 1, "padding": 1, "dilation": 1,
         "extra_h": 9, "extra_w": 7, "bias": True}
    x, S1s, U1s, b = draw(g, seed=3)
    expected = panther_reference(x, S1s, U1s, b, 1, 1, 1)
    y = sketched_conv2d(*(t.to(dtype) for t in (x, S1s, U1s, b)), padding=1)
    assert y.dtype == dtype
    assert relative_error(y, expected) <= {torch.float32: 1e-5, torch.bfloat16: 2e-2}[dtype]


def test_gradcheck():
    g = {"n": 2, "c": 2, "out": 3, "terms": 1, "k": 2, "kh": 2, "kw": 3, "stride": 2, "padding": 1, "dilation": 1,
         "extra_h": 2, "extra_w": 3, "bias": True}
    x, S1s, U1s, b = draw(g, seed=4)
    for t in (x, S1s, b):
        t.requires_grad_()
    assert torch.autograd.gradcheck(lambda x, S, b: sketched_conv2d(x, S, U1s, b, stride=2, padding=1), (x, S1s, b))


def test_channels_last_in_channels_last_out_and_unbatched_inputs():
    torch.manual_seed(5)
    layer = SKConv2d(6, 10, num_terms=2, low_rank=3, dtype=torch.float64)
    x = torch.randn(3, 6, 9, 11, dtype=torch.float64)
    y = layer(x)
    y_last = layer(x.to(memory_format=torch.channels_last))
    assert y.is_contiguous() and y_last.is_contiguous(memory_format=torch.channels_last)
    assert relative_error(y_last, y) <= 1e-12  # oneDNN may order the sums differently per format
    assert relative_error(layer(x[1]), y[1]) <= 1e-12
    strided = x[:, :, :, ::2]  # a non-contiguous input
    expected = panther_reference(strided, layer.S1s, layer.U1s, layer.bias, 1, 1, 1)
    assert relative_error(layer(strided), expected) <= 1e-12


@pytest.mark.parametrize(("padding", "kernel", "dilation"), [("same", 3, 1), ("same", 5, 2), ("valid", 3, 1),
                                                              (2, 3, 1), ((0, 2), (1, 3), 1)])
def test_padding_forms_give_nn_conv2ds_output_shape(padding, kernel, dilation):
    x = torch.randn(1, 4, 13, 12)
    layer = SKConv2d(4, 5, kernel_size=kernel, padding=padding, dilation=dilation, num_terms=1, low_rank=2)
    conv = nn.Conv2d(4, 5, kernel, padding=padding, dilation=dilation)
    assert layer(x).shape == conv(x).shape


def test_svd_conversion_is_the_best_rank_2tk_approximation_and_panthers_error_is_as_predicted():
    torch.manual_seed(6)
    conv = nn.Conv2d(12, 40, 3, padding=1, dtype=torch.float64)
    M = conv.weight.detach().reshape(40, -1).t()
    s = torch.linalg.svdvals(M)
    x = torch.randn(2, 12, 10, 10, dtype=torch.float64)
    for terms, k in ((1, 3), (2, 5), (3, 4)):
        layer = SKConv2d.fromTorch(conv, terms, k)
        optimum = math.sqrt(float((s[2 * terms * k:] ** 2).sum() / (s ** 2).sum()))
        # a randomized SVD below a quarter of the full rank: within 1% of the optimum, never below it
        assert optimum - 1e-12 <= relative_error(layer.weight, conv.weight) <= 1.01 * optimum
        assert relative_error(layer(x), F.conv2d(x, layer.weight, layer.bias, padding=1)) <= 1e-12
        assert torch.equal(layer.bias, conv.bias)
    exact = SKConv2d.fromTorch(conv, 5, 4)  # 2·T·k = 40 = out_channels: every direction kept
    assert relative_error(exact(x), conv(x)) <= 1e-12
    errors = [relative_error(SKConv2d.fromTorch(conv, 4, 8, init="panther").weight, conv.weight) for _ in range(5)]
    assert float(np.median(errors)) == pytest.approx(math.sqrt(39 / 64), rel=0.25)


def test_to_conv2d_and_state_dict_round_trip(tmp_path):
    torch.manual_seed(7)
    layer = SKConv2d(5, 7, kernel_size=(3, 1), stride=(2, 1), padding="same", num_terms=2, low_rank=2, dilation=2)
    x = torch.randn(2, 5, 11, 9)
    dense = layer.to_conv2d()
    assert relative_error(dense(x), layer(x)) <= 1e-5
    torch.save(layer.state_dict(), tmp_path / "layer.pt")
    other = SKConv2d(5, 7, kernel_size=(3, 1), stride=(2, 1), padding="same", num_terms=2, low_rank=2, dilation=2)
    other.load_state_dict(torch.load(tmp_path / "layer.pt"))
    assert torch.equal(other(x), layer(x))
    wrong = SKConv2d(5, 7, kernel_size=(3, 1), stride=(2, 1), padding="same", num_terms=2, low_rank=3, dilation=2)
    with pytest.raises((ValueError, RuntimeError), match="low_rank|size mismatch"):
        wrong.load_state_dict(layer.state_dict())


def test_sketch_model_converts_convolutions_and_restore_model_rebuilds_them():
    torch.manual_seed(8)

    def make():
        return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 24, 3, stride=2),
                             nn.Conv2d(24, 24, 3, groups=3), nn.Flatten(), nn.Linear(96, 5))
    model = make()
    x = torch.randn(4, 3, 9, 9)
    report = sketch_model(model, num_terms=2, low_rank=4, conv2d=True)
    assert type(model[0]) is SKConv2d and type(model[2]) is SKConv2d and type(model[3]) is nn.Conv2d
    assert report["2"].kind == "SKConv2d" and report["2"].in_features == 16 * 9 and report["2"].out_features == 24
    assert report["2"].params_after == 2 * 2 * 4 * 16 * 9 + 24
    assert report["2"].weight_error == pytest.approx(relative_error(model[2].weight, report["2"].original.weight))
    assert [r.name for r in report.kept] == ["3"] and "groups" in report.kept[0].reason
    y = model(x)
    restored = restore_model(make(), model.state_dict())
    assert type(restored[2]) is SKConv2d and torch.equal(restored(x), y)
    kept = make()
    assert len(sketch_model(kept, num_terms=2, low_rank=4)) == 1 and type(kept[0]) is nn.Conv2d  # off by default


def test_tolerance_sizes_each_convolution_from_its_singular_values():
    torch.manual_seed(9)
    model = nn.Sequential(nn.Conv2d(8, 32, 3, padding=1))
    report = sketch_model(model, num_terms=1, tolerance=0.3, conv2d=True)
    assert report["0"].weight_error <= 0.3
    smaller = SKConv2d.fromTorch(report["0"].original, 1, report["0"].rank - 1)
    assert relative_error(smaller.weight, report["0"].original.weight) > 0.3


def test_compiles_without_graph_breaks_and_trains():
    torch.manual_seed(10)
    layer = SKConv2d(3, 8, num_terms=1, low_rank=4)
    x = torch.randn(2, 3, 8, 8)
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    y = compiled(x)
    assert relative_error(y, layer(x)) <= 1e-6
    y.square().sum().backward()
    assert layer.S1s.grad is not None and layer.S1s.grad.abs().sum() > 0
    reference = panther_reference(x, layer.S1s, layer.U1s, layer.bias, 1, 1, 1).square().sum()
    expected = torch.autograd.grad(reference, layer.S1s)[0]
    assert relative_error(layer.S1s.grad, expected) <= 1e-5


def test_refusals_name_the_argument():
    conv = nn.Conv2d(4, 6, 3)
    with pytest.raises(ValueError, match="groups: expected 1"):
        SKConv2d.fromTorch(nn.Conv2d(4, 6, 3, groups=2), 1, 2)
    with pytest.raises(ValueError, match="padding_mode: expected 'zeros'"):
        SKConv2d.fromTorch(nn.Conv2d(4, 6, 3, padding=1, padding_mode="reflect"), 1, 2)
    with pytest.raises(ValueError, match="'same' with kernel_size"):
        SKConv2d.fromTorch(nn.Conv2d(4, 6, 2, padding="same"), 1, 2)
    with pytest.raises(TypeError, match="expected a torch.nn.Conv2d, got Linear"):
        SKConv2d.fromTorch(nn.Linear(3, 3), 1, 2)
    with pytest.raises(ValueError, match="layer: expected a Conv2d"):
        SKConv2d(4, 7, layer=conv)
    with pytest.raises(ValueError, match="padding: expected 'same', 'valid'"):
        SKConv2d(4, 6, padding="full")
    with pytest.raises(ValueError, match="stride: expected an integer ≥ 1"):
        SKConv2d(4, 6, stride=0)
    with pytest.raises(ValueError, match="kernel_size: expected an integer ≥ 1 or a pair"):
        SKConv2d(4, 6, kernel_size=(3, 3, 3))
    with pytest.raises(ValueError, match="low_rank: expected an integer ≥ 1"):
        SKConv2d(4, 6, low_rank=0)
    with pytest.raises(ValueError, match="init: expected 'panther' or 'svd'"):
        SKConv2d(4, 6, init="linear")
    layer = SKConv2d(4, 6, padding=0, num_terms=1, low_rank=2)
    with pytest.raises(ValueError, match="expected 4 input channels .*got 3"):
        layer(torch.randn(1, 3, 8, 8))
    with pytest.raises(ValueError, match="x: expected a \\(N, C, H, W\\) or \\(C, H, W\\) tensor"):
        layer(torch.randn(8, 8))
    with pytest.raises(ValueError, match="smaller than the 3×3 kernel"):
        layer(torch.randn(1, 4, 2, 8))
    with pytest.raises(ValueError, match="S1s \\(2T·k, C, kh, kw\\) and U1s"):
        sketched_conv2d(torch.randn(1, 4, 5, 5), torch.randn(5, 4, 3, 3), torch.randn(2, 2, 6))
    with pytest.raises(ValueError, match="conv2d: convolutions become SKConv2d"):
        sketch_model(nn.Sequential(conv), low_rank=2, layer="lowrank", conv2d=True)
