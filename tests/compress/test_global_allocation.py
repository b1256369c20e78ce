"""sketch_model(allocation="global") (issue 59, item 1) on models whose answer is known: the
budget is respected exactly, a layer whose weight has low rank or whose output barely reaches
the model's output gets less than one that matters, the predicted errors agree with the measured
ones, int8 options under a byte budget, and every argument mistake is refused by name."""
import copy

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from sketchcore.torch import LowRankLinear, sketch_model  # noqa: E402


class TwoBranches(nn.Module):
    """y = a(x)·gain_a + b(x)·gain_b: two 256 → 256 layers reading the same input."""

    def __init__(self, gain_a=1.0, gain_b=1.0):
        super().__init__()
        self.a, self.b = nn.Linear(256, 256), nn.Linear(256, 256)
        self.gain_a, self.gain_b = gain_a, gain_b

    def forward(self, x):
        return self.a(x) * self.gain_a + self.b(x) * self.gain_b


def batches(generator, count=3, rows=128):
    return [torch.randn(rows, 256, generator=generator) for _ in range(count)]


def ranks(model):
    return {name: module.S.shape[1] for name, module in model.named_modules() if isinstance(module, LowRankLinear)}


def weight_params(report):
    """Parameters of the weights (biases left out) after conversion, as the budget counts them."""
    total = 0
    for row in [*report.replaced.values(), *report.kept]:
        total += row.rank * (row.in_features + row.out_features) if row.choice == "lowrank" else \
            row.in_features * row.out_features
    return total


def test_a_low_rank_weight_gets_a_small_rank_and_the_full_rank_one_the_budget(rng):
    generator = torch.Generator().manual_seed(int(rng.integers(2**31)))
    model = TwoBranches()
    with torch.no_grad():  # a: exactly rank 16; b: full rank
        model.a.weight.copy_(torch.randn(256, 16, generator=generator) @ torch.randn(16, 256, generator=generator) / 16)
    report = sketch_model(model, param_ratio=0.25, calibration=batches(generator), allocation="global")
    got = ranks(model)
    assert got["a"] == 16 and got["b"] > 16
    assert report["a"].output_error < 1e-5
    assert weight_params(report) <= report.budget[1] == int(0.25 * 2 * 256 * 256)
    assert report.budget[0] == "parameters" and report.budget[2] == weight_params(report)


def test_a_layer_whose_output_barely_reaches_the_model_gets_less(rng):
    generator = torch.Generator().manual_seed(int(rng.integers(2**31)))
    model = TwoBranches(gain_a=0.01, gain_b=1.0)  # the same kind of weights; a's error is damped 100x
    data = batches(generator)
    uniform = copy.deepcopy(model)
    report = sketch_model(model, param_ratio=0.3, calibration=data, allocation="global")
    uniform_report = sketch_model(uniform, param_ratio=0.3, calibration=data)
    got = ranks(model)
    assert got["a"] < got["b"]
    assert report.output_error < 0.9 * uniform_report.output_error


def test_the_predicted_model_error_agrees_with_the_measured_one(rng):
    generator = torch.Generator().manual_seed(int(rng.integers(2**31)))
    model = nn.Sequential(nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 256))
    report = sketch_model(model, param_ratio=0.4, calibration=batches(generator), allocation="global")
    assert report.allocation == "global"
    assert 0.5 * report.output_error < report.predicted_output_error < 2.0 * report.output_error
    shares = [row.predicted_error for row in report.replaced.values()]
    assert all(share is not None and share >= 0 for share in shares)
    assert sum(share**2 for share in shares) == pytest.approx(report.predicted_output_error**2, rel=1e-9)
    assert all(row.choice in ("lowrank", "dense") for row in [*report.replaced.values(), *report.kept])
    assert "global allocation:" in str(report) and "predicted" in str(report)


def test_a_byte_budget_with_int8_uses_int8_layers_within_the_budget(rng):
    from sketchcore.torch import Int8Linear, Int8LowRankLinear

    generator = torch.Generator().manual_seed(int(rng.integers(2**31)))
    model = TwoBranches()
    with torch.no_grad():
        model.a.weight.copy_(torch.randn(256, 16, generator=generator) @ torch.randn(16, 256, generator=generator) / 16)
    data = batches(generator)
    reference = copy.deepcopy(model)
    report = sketch_model(model, bytes_ratio=0.25, calibration=data, allocation="global", quantize="int8")
    assert isinstance(model.a, Int8LowRankLinear) and model.a.rank == 16  # rank 16 is exact: int8 of it is cheap
    assert isinstance(model.b, (Int8Linear, Int8LowRankLinear))
    unit, budget, spent = report.budget
    assert unit == "bytes" and spent <= budget == int(0.25 * 4 * 2 * 256 * 256)
    model.eval()
    with torch.no_grad():
        x = data[0]
        error = (model(x) - reference(x)).norm() / reference(x).norm()
    assert error < 0.05
    assert {row.quantize for row in report.replaced.values()} == {"int8"}


@pytest.mark.parametrize("kwargs, message", [
    (dict(param_ratio=0.5, allocation="best"), "allocation: expected 'uniform' or 'global', got 'best'"),
    (dict(bytes_ratio=0.5), "bytes_ratio: expected allocation='global'"),
    (dict(bytes_ratio=1.5, allocation="global"), r"bytes_ratio: expected a number in \(0, 1\]"),
    (dict(bytes_ratio=0.0, allocation="global"), r"bytes_ratio: expected a number in \(0, 1\]"),
    (dict(param_ratio=0.5, bytes_ratio=0.5, allocation="global"), "expected exactly one of low_rank, tolerance, "
                                                                   "param_ratio and bytes_ratio"),
    (dict(low_rank=4, allocation="global"), r"allocation='global': expected param_ratio= or bytes_ratio="),
    (dict(param_ratio=0.5, allocation="global", calibrated=False), r"allocation='global': expected calibration="),
    (dict(param_ratio=0.5, allocation="global", num_terms=2), r"allocation='global': expected layer='lowrank'"),
    (dict(param_ratio=0.5, allocation="global", quantize="fp8"), r"allocation='global': expected quantize=None or "
                                                                  "'int8'"),
])
def test_argument_mistakes_are_refused_by_name(kwargs, message):
    model = nn.Sequential(nn.Linear(32, 32))
    calibrated = kwargs.pop("calibrated", True)
    with pytest.raises(ValueError, match=f"sketch_model: .*{message}"):
        sketch_model(model, calibration=[torch.randn(4, 32)] if calibrated else None, **kwargs)
    assert isinstance(model[0], nn.Linear)  # nothing was changed


def test_a_budget_too_small_for_every_layer_is_refused():
    model = nn.Sequential(nn.Linear(256, 256), nn.Linear(256, 256))
    with pytest.raises(ValueError, match=r"sketch_model: param_ratio=0.001: the budget of 131 parameters is below "
                                         r"every calibrated layer at its smallest option \(allocate: budget: expected "
                                         r"at least 1024"):
        sketch_model(model, param_ratio=0.001, calibration=[torch.randn(8, 256)], allocation="global")


def test_a_small_budget_takes_ranks_below_16_and_rectangular_layers_quantize(rng):
    from sketchcore.torch import Int8Linear

    generator = torch.Generator().manual_seed(int(rng.integers(2**31)))
    model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 32))
    data = [torch.randn(256, 64, generator=generator)]
    report = sketch_model(model, param_ratio=0.25, calibration=data, allocation="global")
    assert report.budget[2] <= report.budget[1] == int(0.25 * (64 * 128 + 128 * 32))
    assert all(1 <= row.rank < 16 for row in report.replaced.values())
    wide = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 48)).eval()
    reference = copy.deepcopy(wide)
    report = sketch_model(wide, bytes_ratio=0.26, calibration=[torch.randn(256, 64, generator=generator)],
                          allocation="global", quantize="int8")
    full = [name for name, m in wide.named_children() if isinstance(m, Int8Linear)]
    assert full and all(report[name].choice == "int8" and report[name].output_error < 0.02 for name in full)
    x = torch.randn(64, 64, generator=generator)
    with torch.no_grad():  # held-out error as the calibration error (random weights: the rank costs)
        error = torch.linalg.norm(wide(x) - reference(x)) / torch.linalg.norm(reference(x))
    assert error < 1.5 * report.output_error + 0.02
