"""Data-aware conversion through sketch_model(calibration=...): each layer's output error on the
activations it received is the float64 optimum (computed directly from X W), tolerance is an
output error, every input form works, the report shows output errors (per layer and the whole
model, checked against direct computation) or labels weight errors, Performer attention is
"unknown" without calibration and warns above the tolerance with it, and bad calibration
inputs get clear errors."""
import copy
import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
sct = pytest.importorskip("sketchcore.torch")
nn = torch.nn


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(int(np.random.default_rng().integers(2**31)))


def mlp(gen):
    model = nn.Sequential(nn.Linear(16, 24), nn.ReLU(), nn.Linear(24, 10)).double()
    with torch.no_grad():
        for layer in (model[0], model[2]):
            layer.weight.copy_(torch.randn(layer.weight.shape, generator=gen, dtype=torch.float64))
    return model


def activations(gen, batches=3):
    """Anisotropic inputs with leading dimensions (2, 5), as real features are."""
    scale = torch.exp(torch.linspace(-3, 1, 16, dtype=torch.float64))
    return [torch.randn(2, 5, 16, generator=gen, dtype=torch.float64) * scale for _ in range(batches)]


def optimum(X, M, rank):
    s = torch.linalg.svdvals(X @ M)
    return math.sqrt(float((s[rank:] ** 2).sum() / (s**2).sum()))


def layer_inputs(model, batches):
    """What each linear layer of the dense mlp receives, concatenated over batches."""
    X0 = torch.cat([b.reshape(-1, 16) for b in batches])
    return {"0": X0, "2": torch.relu(model[0](X0)).detach()}


def output_error(X, new, old):
    with torch.no_grad():
        return float(torch.linalg.norm(new(X) - old(X)) / torch.linalg.norm(old(X) - old.bias))


@pytest.mark.parametrize("layer", ["lowrank", "sklinear"])
def test_each_layer_reaches_the_optimal_output_error_on_its_activations(gen, layer):
    dense = mlp(gen)
    batches = activations(gen)
    inputs = layer_inputs(dense, batches)
    model = copy.deepcopy(dense)
    extra = {"num_terms": 1} if layer == "sklinear" else {}
    report = sct.sketch_model(model, low_rank=3, layer=layer, calibration=batches, **extra)
    plain = copy.deepcopy(dense)
    sct.sketch_model(plain, low_rank=3, layer=layer, **extra)
    directions = 3 if layer == "lowrank" else 6
    for name in ("0", "2"):
        X, old = inputs[name], dense.get_submodule(name)
        expected = optimum(X, old.weight.detach().t(), directions)
        achieved = output_error(X, model.get_submodule(name), old)
        assert achieved == pytest.approx(expected, abs=1e-8)
        assert report[name].output_error == pytest.approx(expected, abs=1e-8)
        assert output_error(X, plain.get_submodule(name), old) > achieved  # the weight SVD does worse here
        assert report[name].weight_error > 0
    x = torch.cat(batches)
    with torch.no_grad():
        model_error = float(torch.linalg.norm(model(x) - dense(x)) / torch.linalg.norm(dense(x)))
    assert report.output_error == pytest.approx(model_error, rel=1e-9)
    text = str(report)
    assert "output err" in text and "weight err" not in text and f"{model_error:.4f}" in text


def test_tolerance_is_an_output_error_and_picks_the_smallest_rank(gen):
    dense = mlp(gen)
    batches = activations(gen)
    inputs = layer_inputs(dense, batches)
    model = copy.deepcopy(dense)
    report = sct.sketch_model(model, tolerance=0.2, calibration=batches)
    for name in ("0", "2"):
        X, M = inputs[name], dense.get_submodule(name).weight.detach().t()
        row = report[name]
        assert row.kind == "LowRankLinear" and row.output_error <= 0.2
        assert optimum(X, M, row.rank) <= 0.2 < optimum(X, M, row.rank - 1)


def test_every_input_form_gives_the_same_conversion(gen):
    class TwoInputs(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(8, 8).double(), nn.Linear(8, 6).double()

        def forward(self, x, shift=None):
            return self.b(torch.tanh(self.a(x + (0 if shift is None else shift))))

    torch.manual_seed(0)
    dense = TwoInputs()
    xs = [torch.randn(7, 8, generator=gen, dtype=torch.float64) for _ in range(2)]
    forms = {"tensors": xs, "tuples": [(x, None) for x in xs], "dicts": [{"x": x} for x in xs],
             "generator": (x for x in xs)}
    weights = {}
    for form, calibration in forms.items():
        model = copy.deepcopy(dense)
        sct.sketch_model(model, low_rank=2, calibration=calibration)
        weights[form] = model.a.weight.detach()
    for form in forms:
        torch.testing.assert_close(weights[form], weights["tensors"], rtol=0, atol=1e-12)


def test_layers_the_calibration_never_reaches_stay_dense(gen):
    class Branches(nn.Module):
        def __init__(self):
            super().__init__()
            self.used, self.unused = nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x):
            return self.used(x)

    model = Branches()
    report = sct.sketch_model(model, low_rank=2, calibration=[torch.randn(4, 8)])
    assert list(report) == ["used"] and type(model.unused) is nn.Linear
    assert report.kept[0].name == "unused" and "never called on the calibration inputs" in report.kept[0].reason


def test_calibration_restores_training_modes_and_new_layers_follow_them():
    model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), nn.Linear(8, 4))
    model.train()
    model[1].eval()  # a mixed state must come back as it was
    sct.sketch_model(model, low_rank=1, calibration=[torch.randn(4, 8)], dropout=0.25, layer="sklinear", num_terms=1)
    assert [m.training for m in model] == [True, False, True]
    evaluated = nn.Sequential(nn.Linear(8, 8)).eval()
    sct.sketch_model(evaluated, low_rank=2)
    assert not evaluated[0].training


@pytest.mark.parametrize(("calibration", "error", "match"), [
    (torch.randn(3, 8), TypeError, r"calibration: expected an iterable of model inputs .*got Tensor \(wrap a single "
                                   r"batch in a list: \[batch\]\)"),
    (5, TypeError, "calibration: expected an iterable of model inputs.*got int"),
    ([], ValueError, "calibration: expected at least one batch of model inputs, got none"),
    ([3.0], TypeError, "calibration: expected each batch to be a tensor, a tuple of positional arguments or a dict "
                       "of keyword arguments, got float"),
])
def test_bad_calibration_inputs(calibration, error, match):
    with pytest.raises(error, match=match):
        sct.sketch_model(nn.Sequential(nn.Linear(8, 8)), low_rank=2, calibration=calibration)


def encoder(seed):
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True, dtype=torch.float64)
    return nn.TransformerEncoder(layer, 1, enable_nested_tensor=False).eval()


def test_performer_error_is_unknown_without_calibration_and_measured_with_it():
    model = encoder(3)
    report = sct.sketch_model(model, attention=8)
    row = report["layers.0.self_attn"]
    assert math.isnan(row.weight_error) and row.output_error is None
    text = str(report)
    assert "unknown" in text and "Performer attention: error unknown without calibration" in text

    dense = encoder(3)
    model = encoder(3)
    x = torch.randn(2, 24, 32, dtype=torch.float64) * 3  # large scores: sharp attention, which FAVOR+ misses
    with pytest.warns(UserWarning, match=r"Performer attention at 'layers.0.self_attn' \(8 random features\) has a "
                                         r"relative output error of .* above the tolerance 0.05"):
        report = sct.sketch_model(model, attention=8, tolerance=0.05, calibration=[x], include=["*self_attn"])
    with torch.no_grad():
        exact = dense.layers[0].self_attn(x, x, x, need_weights=False)[0]
        approximate = model.layers[0].self_attn(x, x, x, need_weights=False)[0]
        expected = float(torch.linalg.norm(approximate - exact) / torch.linalg.norm(exact))
        whole = float(torch.linalg.norm(model(x) - dense(x)) / torch.linalg.norm(dense(x)))
    row = report["layers.0.self_attn"]
    assert row.output_error == pytest.approx(expected, rel=1e-9) and row.output_error > 0.05
    assert report.output_error == pytest.approx(whole, rel=1e-9)
    assert "unknown" not in str(report)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # within tolerance: no warning
        sct.sketch_model(encoder(3), attention=8, tolerance=0.999, calibration=[x], include=["*self_attn"])


def test_convolutions_get_their_measured_output_error():
    torch.manual_seed(0)
    dense = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 1)).double().eval()
    model = copy.deepcopy(dense)
    images = torch.randn(2, 3, 6, 6, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = sct.sketch_model(model, 1, 2, conv2d=True, calibration=[images], include=["0"])
    with torch.no_grad():
        exact, approximate = dense[0](images), model[0](images)
    expected = float(torch.linalg.norm(approximate - exact) / torch.linalg.norm(exact))
    assert report["0"].kind == "SKConv2d" and report["0"].output_error == pytest.approx(expected, rel=1e-9)
