"""sketchcore.tuner's configuration API (Panther's selectors, parameter specs, TuningConfigs), its
Conv2d and MultiheadAttention replacements, and every bad argument."""
import pytest
import torch
from torch import nn

from sketchcore.torch import RandMultiHeadAttention, SKConv2d
from sketchcore.tuner import (Categorical, Float, GridSearch, Int, LayerConfig, RandomSearch, SKAutoTuner,
                              SpectralSearch, TuningConfigs)
from sketchcore.tuner._params import choices
from sketchcore.tuner._select import resolve


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.encoder = nn.ModuleList([nn.Linear(16, 32), nn.Linear(32, 32), nn.Linear(32, 16)])
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        h = self.conv(x).mean((2, 3))
        for layer in self.encoder:
            h = torch.relu(layer(h))
        h = self.attn(h[:, None], h[:, None], h[:, None])[0][:, 0]
        return self.head(h)


@pytest.fixture
def net():
    torch.manual_seed(0)
    return Net().eval()


def layers(model):
    return {name: m for name, m in model.named_modules() if name}


@pytest.mark.parametrize("selector, expected", [
    ("head", ["head"]),
    (["encoder.0", "head"], ["encoder.0", "head"]),
    ("encoder\\.[12]", ["encoder.1", "encoder.2"]),
    ({"type": "Linear"}, ["encoder.0", "encoder.1", "encoder.2", "head"]),  # out_proj is not an nn.Linear by type
    ({"type": ["Conv2d", "MultiheadAttention"]}, ["attn", "conv"]),
    ({"contains": "encoder", "type": "Linear", "indices": [0, 2]}, ["encoder.0", "encoder.2"]),
    ({"pattern": "encoder", "type": "Linear", "range": [1, 3]}, ["encoder.1", "encoder.2"]),
    ({"pattern": ["conv", "head"], "indices": 1}, ["head"]),
    ({"pattern": "encoder.*", "type": "Linear", "range": [0, 3, 2]}, ["encoder.0", "encoder.2"]),
])
def test_selectors(net, selector, expected):
    assert sorted(resolve(layers(net), selector)) == sorted(expected)


@pytest.mark.parametrize("selector, error, match", [
    ("nothing", ValueError, "no layer of the model matches 'nothing'"),
    ("(", ValueError, "neither a layer name nor a valid regular expression"),
    ({"type": "Linear", "indices": [0], "range": [0, 1]}, ValueError, "at most one of 'indices' and 'range'"),
    ({"type": "Linear", "indices": [9]}, ValueError, r"expected indices in \[0, 4\)"),
    ({"type": "Linear", "indices": "0"}, TypeError, "expected an int or a list of ints"),
    ({"type": "Linear", "range": [2, 1]}, ValueError, "expected 0 ≤ start < end ≤ 4"),
    ({"type": "Linear", "range": [0]}, TypeError, r"expected \[start, end\] or \[start, end, step\]"),
    ({"kind": "Linear"}, ValueError, "expected selector keys among"),
    ({"type": 3}, TypeError, "expected a string or a list of strings"),
    ([1, 2], TypeError, "expected a string or a list of strings"),
])
def test_selector_errors(net, selector, error, match):
    with pytest.raises(error, match=match):
        resolve(layers(net), selector)


def test_param_specs():
    assert choices(Categorical((1, 2)), "x") == [1, 2]
    assert choices(Int(4, 16, step=4), "x") == [4, 8, 12, 16]
    assert choices(Float(0.1, 0.3, step=0.1), "x") == pytest.approx([0.1, 0.2, 0.3])
    assert choices(Float(0.0, 1.0), "x") is None
    assert choices([3, 1], "x") == [3, 1]


@pytest.mark.parametrize("make, error, match", [
    (lambda: Categorical([]), ValueError, "Categorical: choices: expected at least one choice"),
    (lambda: Categorical("abc"), TypeError, "Categorical: choices: expected a sequence, got str"),
    (lambda: Int(5, 1), ValueError, "Int: high: expected ≥ low = 5, got 1"),
    (lambda: Int(1, 5, step=0), ValueError, "Int: step: expected an integer ≥ 1, got 0"),
    (lambda: Int(0, 5, log=True), ValueError, "Int: low: expected > 0 with log=True, got 0"),
    (lambda: Int(1.5, 5), TypeError, "Int: low: expected an int, got float"),
    (lambda: Float(1.0, 0.0), ValueError, "Float: high: expected ≥ low"),
    (lambda: Float(0.0, 1.0, step=-1.0), ValueError, "Float: step: expected > 0"),
    (lambda: Float(0.0, 1.0, log=True), ValueError, "Float: low: expected > 0 with log=True"),
    (lambda: Float(float("nan"), 1.0), ValueError, "Float: low: expected a finite number"),
    (lambda: choices(Int(0, 10**6), "rank"), ValueError, "params: rank: expected an Int range of at most 4096"),
    (lambda: choices({1, 2}, "rank"), TypeError, "params: rank: expected a list, Categorical, Int or Float, got set"),
    (lambda: choices([], "rank"), ValueError, "params: rank: expected at least one value"),
    (lambda: LayerConfig("x", params="manual"), ValueError, "LayerConfig: params: expected 'auto' or a dict, got 'manual'"),
    (lambda: LayerConfig("x", params={}), ValueError, "LayerConfig: params: expected at least one parameter"),
    (lambda: LayerConfig("x", params=3), TypeError, "LayerConfig: params: expected 'auto' or a dict, got int"),
    (lambda: LayerConfig(3), TypeError, "LayerConfig: layer_names: expected a string"),
    (lambda: LayerConfig("x", separate=1), TypeError, "LayerConfig: separate: expected a bool, got int"),
    (lambda: TuningConfigs(["x"]), TypeError, r"TuningConfigs: configs\[0\]: expected a LayerConfig, got str"),
    (lambda: TuningConfigs([]).remove(0), IndexError, "TuningConfigs: index: expected 0 ≤ index < 0, got 0"),
    (lambda: RandomSearch(n_trials=0), ValueError, "RandomSearch: n_trials: expected an integer ≥ 1, got 0"),
    (lambda: SpectralSearch(max_evaluations=0), ValueError, "SpectralSearch: max_evaluations: expected an integer"),
    (lambda: SpectralSearch(refine="yes"), TypeError, "SpectralSearch: refine: expected a bool"),
    (lambda: SpectralSearch(data_aware=None), TypeError, "SpectralSearch: data_aware: expected a bool"),
])
def test_spec_and_config_errors(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_tuning_configs_editing():
    a, b, c = LayerConfig("a"), LayerConfig("b", {"rank": [2]}), LayerConfig("c", separate=False)
    configs = TuningConfigs([a, b])
    assert len(configs.add(c)) == 3 and configs.add(c)[2] == c and len(configs) == 2
    assert list(configs.remove(0)) == [b]
    assert configs.replace(1, c)[1] == c
    assert list(configs.merge(TuningConfigs([c]))) == [a, b, c]
    assert list(configs.filter(lambda x: x.params == "auto")) == [a]
    assert all(x.copy_weights is False for x in configs.map(lambda x: LayerConfig(x.layer_names, x.params,
                                                                                    x.separate, False)))
    clone = configs.clone()
    assert list(clone) == list(configs) and clone[1] is not b and clone[1].params is not b.params
    assert "LayerConfig(layer_names='a', params='auto'" in repr(configs)


def output_error_accuracy(model, reference, x):
    """A smooth score: minus the output's relative error against the dense model."""
    with torch.no_grad():
        y = model(x)
    return -float(torch.linalg.norm(y - reference) / torch.linalg.norm(reference))


def test_conv_and_attention_auto(net):
    x = torch.randn(8, 3, 12, 12)
    with torch.no_grad():
        reference = net(x)
    config = TuningConfigs([LayerConfig({"type": ["Conv2d", "MultiheadAttention"]}, "auto")])
    tuner = SKAutoTuner(net, config, lambda m: output_error_accuracy(m, reference, x), accuracy_threshold=-0.3)
    best = tuner.tune()
    assert set(best) == {"conv", "attn"}
    tuned = tuner.apply_best_params()
    for name, kind in (("conv", SKConv2d), ("attn", RandMultiHeadAttention)):
        module = tuned.get_submodule(name)
        assert isinstance(module, kind) == (best[name]["params"] is not None)
    assert output_error_accuracy(tuned, reference, x) >= -0.3
    assert tuner.evaluations <= 60


def test_conv_explicit_params_and_random_weights(net):
    """copy_weights=False builds fresh layers (no spectrum: the search bisects by size)."""
    x = torch.randn(4, 3, 8, 8)
    config = LayerConfig(["conv"], {"num_terms": [1], "low_rank": Int(1, 4)}, copy_weights=False)
    tuner = SKAutoTuner(net, config, lambda m: 1.0, accuracy_threshold=0.5)
    best = tuner.tune()
    assert best["conv"]["params"] == {"num_terms": 1, "low_rank": 1}  # every setting passes: the smallest
    layer = tuner.apply_best_params().get_submodule("conv")
    assert isinstance(layer, SKConv2d) and layer(x).shape == (4, 16, 8, 8)


def test_attention_explicit_params_black_box(net):
    config = LayerConfig(["attn"], {"num_random_features": [4, 8], "kernel_fn": ["relu", "softmax"]})
    tuner = SKAutoTuner(net, config, lambda m: 1.0, GridSearch(), accuracy_threshold=0.5)
    best = tuner.tune()
    assert best["attn"]["params"] in ({"num_random_features": 4, "kernel_fn": "relu"},
                                      {"num_random_features": 4, "kernel_fn": "softmax"})
    assert isinstance(best["attn"]["best_layer"], RandMultiHeadAttention)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"model": "m"}, TypeError, "SKAutoTuner: model: expected a torch.nn.Module, got str"),
    ({"configs": 3}, TypeError, "SKAutoTuner: configs: expected a TuningConfigs"),
    ({"configs": []}, ValueError, "SKAutoTuner: configs: expected at least one LayerConfig"),
    ({"accuracy_eval_func": 1}, TypeError, "SKAutoTuner: accuracy_eval_func: expected a callable, got int"),
    ({"search_algorithm": object()}, TypeError, "SKAutoTuner: search_algorithm: expected a SpectralSearch"),
    ({"accuracy_threshold": "high"}, ValueError,
     "SKAutoTuner: accuracy_threshold: expected None, 'dense' or a finite number, got 'high'"),
    ({"accuracy_threshold": [0.9]}, TypeError, "SKAutoTuner: accuracy_threshold: expected None, 'dense' or a finite"),
    ({"accuracy_threshold": float("nan")}, TypeError, "SKAutoTuner: accuracy_threshold: expected None, 'dense' or a"),
    ({"num_runs_per_param": 0}, ValueError, "SKAutoTuner: num_runs_per_param: expected an integer ≥ 1, got 0"),
    ({"optmization_eval_func": len, "optimization_eval_func": len}, ValueError, "expected it or its Panther spelling"),
    ({"optmization_eval_func": 3}, TypeError, "SKAutoTuner: optmization_eval_func: expected a callable"),
    ({"configs": [LayerConfig("head"), LayerConfig({"type": "Linear"})]}, ValueError,
     r"layer 'head' is selected by configs\[0\] and configs\[1\]"),
])
def test_tuner_argument_errors(net, kwargs, error, match):
    args = {"model": net, "configs": LayerConfig("head"), "accuracy_eval_func": lambda m: 1.0, **kwargs}
    with pytest.raises(error, match=match):
        SKAutoTuner(**args)


@pytest.mark.parametrize("config, error, match", [
    (LayerConfig("head", {"rank": [64]}), ValueError, r"params: rank: expected at most min\(in, out\) = 4"),
    (LayerConfig("head", {"rank": [0]}), ValueError, "params: rank: expected an integer ≥ 1, got 0"),
    (LayerConfig("head", {"low_rank": [2]}), ValueError, "expected both 'num_terms' and 'low_rank'"),
    (LayerConfig("head", {"rank": [2], "low_rank": [2]}), ValueError, "expected 'rank' alone"),
    (LayerConfig("head", {"width": [2]}), ValueError, r"params: expected keys among \['num_terms', 'low_rank', 'rank'\]"),
    (LayerConfig("encoder.1", {"rank": Float(1.0, 2.0)}), ValueError, "a continuous Float has no finite set"),
    (LayerConfig({"type": "ReLU"}), ValueError, "no layer of the model matches"),
    (LayerConfig("encoder"), TypeError, "layer 'encoder': expected one of \\['Linear', 'Conv2d', 'MultiheadAttention'\\], "
                                        "got ModuleList"),
])
def test_search_space_errors(net, config, error, match):
    with pytest.raises(error, match=match):
        SKAutoTuner(net, config, lambda m: 1.0).tune()


def test_conv_groups_refused():
    model = nn.Sequential(nn.Conv2d(4, 4, 3, groups=2))
    with pytest.raises(ValueError, match="expected a Conv2d with groups=1 and zero padding, got groups=2"):
        SKAutoTuner(model, LayerConfig("0"), lambda m: 1.0).tune()


def test_num_runs_per_param_averages(net):
    scores = iter([1.0, 0.0] * 100)
    calls = []

    def noisy(m):
        calls.append(1)
        return next(scores)

    tuner = SKAutoTuner(net, LayerConfig("encoder.1"), noisy, SpectralSearch(max_evaluations=6), num_runs_per_param=2)
    tuner.tune()
    assert len(calls) == tuner.evaluations <= 6 and len(calls) % 2 == 0
    assert all(row["accuracy"] == 0.5 for row in tuner.history)
    with pytest.raises(ValueError, match="num_runs_per_param: expected at most SpectralSearch.max_evaluations = 6"):
        SKAutoTuner(net, LayerConfig("encoder.1"), noisy, SpectralSearch(max_evaluations=6),
                    num_runs_per_param=7).tune()
