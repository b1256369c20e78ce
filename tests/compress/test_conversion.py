"""Converting trained layers: LowRankLinear, SKLinear's SVD initialisation, `.weight` and
`to_linear`, `sketch_model` by size, ratio or tolerance with its report, the TransformerEncoder
fast path, saving and restoring a compressed model — against float64 and Eckart–Young."""
import copy
import io
import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
sct = pytest.importorskip("sketchcore.torch")


def linear_with_spectrum(gen, n_in, n_out, kind, dtype=torch.float64):
    d = min(n_in, n_out)
    i = torch.arange(1, d + 1, dtype=torch.float64)
    s = {"exp": torch.exp(-i / 16), "fast": torch.exp(-i / 4), "sqrt": 1 / torch.sqrt(i), "flat": torch.ones(d)}[kind]
    U, _ = torch.linalg.qr(torch.randn(n_out, d, generator=gen, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(n_in, d, generator=gen, dtype=torch.float64))
    linear = torch.nn.Linear(n_in, n_out, dtype=dtype)
    with torch.no_grad():
        linear.weight.copy_((U * s) @ V.T)
    return linear, s


def optimal(s, rank):
    return math.sqrt(float((s[rank:] ** 2).sum() / (s**2).sum()))


def relative(a, b):
    a, b = a.detach().double(), b.detach().double()
    return float(torch.linalg.norm(a - b) / torch.linalg.norm(b))


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(int(np.random.default_rng().integers(2**31)))


@pytest.mark.parametrize("kind", ["exp", "sqrt", "flat"])
@pytest.mark.parametrize(("terms", "k"), [(1, 8), (2, 16), (3, 20)])
def test_sklinear_svd_init_is_near_optimal_and_panther_is_not(gen, kind, terms, k):
    linear, s = linear_with_spectrum(gen, 256, 192, kind)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        svd = sct.SKLinear.from_linear(linear, terms, k)
        panther = sct.SKLinear.from_linear(linear, terms, k, init="panther")
    best = optimal(s, 2 * terms * k)
    assert relative(svd.weight, linear.weight) <= 1.15 * best + 1e-9
    # Panther's unbiased initialisation: error ≈ √((d − 1)/(2Tk)) whatever the spectrum.
    expected = math.sqrt((256 - 1) / (2 * terms * k))
    assert 0.7 * expected <= relative(panther.weight, linear.weight) <= 1.3 * expected


def test_sklinear_svd_init_beyond_the_rank_is_exact(gen):
    linear, _ = linear_with_spectrum(gen, 24, 16, "sqrt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        layer = sct.SKLinear.from_linear(linear, 2, 6)  # 2Tk = 24 > min(in, out) = 16
    assert relative(layer.weight, linear.weight) <= 1e-12
    x = torch.randn(5, 24, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(layer(x), linear(x), rtol=1e-10, atol=1e-10)


def test_sklinear_weight_and_to_linear_reproduce_the_layer(gen):
    layer = sct.SKLinear(20, 12, 2, 3, dtype=torch.float64, init="svd")
    x = torch.randn(7, 20, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(layer(x), x @ layer.weight.T + layer.bias, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(layer.to_linear()(x), layer(x), rtol=1e-12, atol=1e-12)
    assert layer.weight.shape == (12, 20)
    with pytest.raises(AttributeError):
        layer.weight = torch.zeros(12, 20)


def test_init_is_checked():
    with pytest.raises(ValueError, match="SKLinear: init: expected 'panther', 'svd' or 'linear', got 'qr'"):
        sct.SKLinear(8, 8, 1, 2, init="qr")


@pytest.mark.parametrize("kind", ["exp", "sqrt", "flat"])
def test_lowrank_from_linear_is_optimal_and_tolerance_picks_the_smallest_rank(gen, kind):
    linear, s = linear_with_spectrum(gen, 200, 160, kind)
    layer = sct.LowRankLinear.from_linear(linear, 24)  # randomized SVD (24 < min(in, out) / 4)
    assert relative(layer.weight, linear.weight) <= optimal(s, 24) * 1.01 + 1e-12
    x = torch.randn(9, 200, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(layer(x), x @ layer.weight.T + linear.bias, rtol=1e-10, atol=1e-10)
    tolerance = 0.3
    chosen = sct.LowRankLinear.from_linear(linear, tolerance=tolerance)
    r = chosen.rank
    assert optimal(s, r) <= tolerance and (r == 1 or optimal(s, r - 1) > tolerance)
    assert relative(chosen.weight, linear.weight) <= tolerance * (1 + 1e-6)


def test_lowrank_trains_and_passes_gradcheck(gen):
    layer = sct.LowRankLinear(6, 4, 2, activation="gelu", dtype=torch.float64)
    x = torch.randn(3, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, S, U, b: torch.ops.sketchcore.sketched_linear(
        x, S, U, b, "gelu", 1.0, 0.0, torch.zeros((), dtype=torch.int64))[0], (x, layer.S, layer.U, layer.bias))
    reference = torch.nn.functional.gelu(x @ layer.S @ layer.U + layer.bias)
    torch.testing.assert_close(layer(x), reference, rtol=1e-12, atol=1e-12)


def test_lowrank_from_scratch_matches_linear_output_variance():
    torch.manual_seed(0)
    layer, dense = sct.LowRankLinear(512, 512, 64, bias=False), torch.nn.Linear(512, 512, bias=False)
    x = torch.randn(256, 512)
    ratio = float(layer(x).detach().var() / dense(x).detach().var())
    assert 0.8 <= ratio <= 1.25


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda l: sct.LowRankLinear.from_linear(l), ValueError, "exactly one of rank and tolerance"),
    (lambda l: sct.LowRankLinear.from_linear(l, 3, tolerance=0.1), ValueError, "exactly one of rank and tolerance"),
    (lambda l: sct.LowRankLinear.from_linear(l, 0), ValueError, "rank: expected an integer ≥ 1, got 0"),
    (lambda l: sct.LowRankLinear.from_linear(l, 9), ValueError, r"rank: expected at most min\(in, out\) = 6, got 9"),
    (lambda l: sct.LowRankLinear.from_linear(l, tolerance=1.5), ValueError, r"tolerance: expected a number in \[0, 1\)"),
    (lambda l: sct.LowRankLinear(6, 8, 2, activation="tanh"), ValueError, "LowRankLinear: activation: expected one of"),
])
def test_lowrank_bad_arguments(call, error, match):
    with pytest.raises(error, match=match):
        call(torch.nn.Linear(8, 6))


def mlp(gen):
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 10)).double()
    for module in model:
        if isinstance(module, torch.nn.Linear):
            linear, _ = linear_with_spectrum(gen, module.in_features, module.out_features, "fast")
            module.weight.data.copy_(linear.weight)
    return model


def test_sketch_model_by_tolerance_reports_every_layer(gen):
    model = mlp(gen)
    x = torch.randn(4, 32, generator=gen, dtype=torch.float64)
    report = sct.sketch_model(model, tolerance=0.05, layer="lowrank", exclude=["4"])
    assert list(report) == ["0", "2"] and isinstance(model[0], sct.LowRankLinear)
    for name, row in report.items():
        assert row.weight_error <= 0.05 and row.params_after < row.params_before
        assert row.original is not None and relative(model.get_submodule(name).weight, row.original.weight) <= 0.05
    assert type(model[4]) is torch.nn.Linear
    text = str(report)
    assert "LowRankLinear" in text and "total parameters" in text and "0.0" in text
    assert model(x).shape == (4, 10)


def test_sketch_model_keeps_layers_it_cannot_compress_and_reports_skips(gen):
    model = torch.nn.Sequential(torch.nn.Linear(16, 16).double())
    linear, _ = linear_with_spectrum(gen, 16, 16, "flat")
    model[0].weight.data.copy_(linear.weight)
    with pytest.warns(UserWarning, match=r"no layer was replaced: every matched layer was kept dense \(0: tolerance"):
        report = sct.sketch_model(model, tolerance=0.01, layer="lowrank")
    assert len(report) == 0 and report.kept[0].kind == "kept dense" and "not fewer parameters" in report.kept[0].reason
    attention = torch.nn.MultiheadAttention(8, 2)
    with pytest.warns(UserWarning, match=r"no convertible layer matched include=\['\*out_proj'\].*skipped: out_proj"):
        report = sct.sketch_model(attention, 1, 2, include=["*out_proj"])
    assert len(report) == 0 and report.skipped and "out_proj" in report.skipped[0][0]
    with pytest.warns(UserWarning, match=r"no convertible layer matched include=\['nothing\*'\], exclude=\[\]$"):
        assert len(sct.sketch_model(model, low_rank=2, include=["nothing*"])) == 0


def test_sketch_model_of_a_state_dict_or_a_non_module_says_to_pass_the_model():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8))
    with pytest.raises(TypeError, match=r"model: expected a torch.nn.Module, got OrderedDict \(a state_dict: build"):
        sct.sketch_model(model.state_dict(), low_rank=2)
    with pytest.raises(TypeError, match=r"model: expected a torch.nn.Module, got Tensor$"):
        sct.sketch_model(model[0].weight.detach(), low_rank=2)
    assert type(model[0]) is torch.nn.Linear


def test_sketch_model_param_ratio_and_sklinear(gen):
    model = mlp(gen)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = sct.sketch_model(model, 2, param_ratio=0.25, include=["2"])
    row = report["2"]
    assert row.kind == "SKLinear" and row.rank == int(0.25 * 64 * 64 // (2 * 128))
    assert row.params_after - 64 <= 0.25 * 64 * 64  # learnable factors within the ratio (+ the bias)


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(num_terms=1), "exactly one of low_rank, tolerance, param_ratio and bytes_ratio"),
    (dict(num_terms=1, low_rank=2, tolerance=0.1), "exactly one of low_rank, tolerance, param_ratio and bytes_ratio"),
    (dict(low_rank=2, layer="sklinear"), "num_terms: expected an integer ≥ 1 for layer='sklinear', got None"),
    (dict(low_rank=2, layer="dense"), "layer: expected 'sklinear' or 'lowrank', got 'dense'"),
    (dict(tolerance=1.0, layer="lowrank"), r"tolerance: expected a number in \[0, 1\), got 1.0"),
    (dict(param_ratio=0.0, layer="lowrank"), r"param_ratio: expected a number in \(0, 1\] .*, got 0.0"),
    (dict(param_ratio=2, layer="lowrank"), r"param_ratio: expected a number in \(0, 1\] \(new parameters / dense "
                                            r"parameters; above 1 the model would grow\), got 2"),
    (dict(param_ratio=float("nan"), layer="lowrank"), r"param_ratio: expected a number in \(0, 1\] .*, got nan"),
])
def test_sketch_model_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        sct.sketch_model(torch.nn.Sequential(torch.nn.Linear(4, 4)), **kwargs)


def test_transformer_encoder_after_conversion_matches_the_slow_path():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True)
    encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sct.sketch_model(encoder, 1, 8, include=["*linear1", "*linear2"])
    x = torch.randn(3, 5, 32)
    with torch.no_grad():
        fast = encoder(x)
        torch.backends.mha.set_fastpath_enabled(False)
        try:
            slow = encoder(x)
        finally:
            torch.backends.mha.set_fastpath_enabled(True)
    torch.testing.assert_close(fast, slow, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("layer", ["lowrank", "sklinear"])
def test_restore_model_rebuilds_a_compressed_model_from_its_state_dict(gen, layer):
    model = mlp(gen)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sct.sketch_model(model, 2, 4, layer=layer, include=["0", "2"])
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    fresh = mlp(torch.Generator().manual_seed(1))  # the dense architecture, other weights
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sct.restore_model(fresh, torch.load(buffer))
    x = torch.randn(6, 32, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(fresh(x), model(x), rtol=0, atol=0)
    wrong = model.state_dict()
    name = next(n for n, entry in wrong._metadata.items() if "sketchcore" in entry)
    wrong._metadata[name]["sketchcore"] = dict(wrong._metadata[name]["sketchcore"], in_features=33)
    with pytest.raises(RuntimeError, match=r"state_dict: .*in_features=33 \(this layer: 32\)"):
        model.load_state_dict(wrong)


def test_digits_mlp_keeps_its_accuracy_at_a_quarter_of_the_parameters():
    datasets = pytest.importorskip("sklearn.datasets")
    digits = datasets.load_digits()
    X = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target)
    torch.manual_seed(0)
    order = torch.randperm(len(y))
    train, test = order[:1400], order[1400:]
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(60):
        for batch in train.split(128):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(X[batch]), y[batch]).backward()
            optimizer.step()

    def accuracy(m):
        with torch.no_grad():
            return float((m(X[test]).argmax(1) == y[test]).float().mean())

    dense = accuracy(model)
    assert dense >= 0.95
    for layer, extra in (("lowrank", {}), ("sklinear", {"num_terms": 1})):
        converted = copy.deepcopy(model)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = sct.sketch_model(converted, param_ratio=0.25, layer=layer, exclude=["4"], **extra)
        biases = 256 + 256  # kept as they are; the weights shrink at least 4×
        assert list(report) == ["0", "2"] and (report.params_after - biases) * 4 <= report.params_before - biases
        assert accuracy(converted) >= dense - 0.01, (layer, dense, accuracy(converted))
