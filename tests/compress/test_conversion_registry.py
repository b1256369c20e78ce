"""Which modules sketch_model converts: register_linear (out_in and in_out weights, names or
classes, its errors), unregistered subclasses reported as skipped, tied and shared weights kept
with the reason (or untied on request), the default layer for tolerance/ratio-only calls, and
the error of a raw core call on tensors that require grad."""
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
sct = pytest.importorskip("sketchcore.torch")
import sketchcore  # noqa: E402
from sketchcore.torch.compress import _registry  # noqa: E402


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(int(np.random.default_rng().integers(2**31)))


class Transposed(torch.nn.Module):
    """A linear map whose weight is stored (in, out), as transformers' Conv1D."""

    def __init__(self, n_in, n_out, gen):
        super().__init__()
        self.kernel = torch.nn.Parameter(torch.randn(n_in, n_out, generator=gen, dtype=torch.float64))
        self.offset = torch.nn.Parameter(torch.randn(n_out, generator=gen, dtype=torch.float64))

    def forward(self, x):
        return x @ self.kernel + self.offset


class Plain(torch.nn.Module):
    """A bias-free linear map stored as nn.Linear's weight."""

    def __init__(self, n_in, n_out, gen):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(n_out, n_in, generator=gen, dtype=torch.float64))

    def forward(self, x):
        return x @ self.w.t()


@pytest.fixture
def registered():
    """Registers Transposed and Plain for one test and removes them after."""
    sct.register_linear(Transposed, weight="kernel", bias="offset", orientation="in_out")
    sct.register_linear(f"{Plain.__module__}.{Plain.__qualname__}", weight="w", bias=None)
    yield
    _registry._BY_CLASS.pop(Transposed, None)
    _registry._BY_NAME.pop(f"{Plain.__module__}.{Plain.__qualname__}", None)


def relative(a, b):
    return float(torch.linalg.norm(a.double() - b.double()) / torch.linalg.norm(b.double()))


@pytest.mark.parametrize("layer", ["lowrank", "sklinear"])
def test_registered_types_convert_in_either_orientation(gen, registered, layer):
    model = torch.nn.Sequential(Transposed(24, 20, gen), torch.nn.ReLU(), Plain(20, 16, gen))
    x = torch.randn(5, 24, generator=gen, dtype=torch.float64)
    extra = {"num_terms": 1} if layer == "sklinear" else {}
    report = sct.sketch_model(model, param_ratio=0.5, layer=layer, **extra)
    assert list(report) == ["0", "2"]
    for name, W, bias in (("0", report["0"].original.kernel, report["0"].original.offset),
                          ("2", report["2"].original.w.t(), None)):
        row, new = report[name], model.get_submodule(name)
        assert type(new).__name__ == ("LowRankLinear" if layer == "lowrank" else "SKLinear")
        assert row.params_after < row.params_before and (new.bias is None) == (bias is None)
        directions = row.rank if layer == "lowrank" else 2 * row.rank
        s = torch.linalg.svdvals(W.detach())
        optimal = float(torch.sqrt((s[directions:] ** 2).sum() / (s**2).sum()))
        assert row.weight_error == pytest.approx(optimal, abs=1e-9)  # the SVD optimum, in the stored orientation
        assert relative(new.weight.detach().t(), W.detach()) == pytest.approx(optimal, abs=1e-9)
    first = model[0]  # computes x ↦ x W_r + b with the bias copied exactly
    torch.testing.assert_close(first(x), x @ first.weight.detach().t() + report["0"].original.offset.detach())


def test_register_linear_rejects_bad_arguments():
    with pytest.raises(TypeError, match="cls: expected a subclass of torch.nn.Module"):
        sct.register_linear(int)
    with pytest.raises(ValueError, match="cls: expected a class or a qualified name"):
        sct.register_linear("Conv1D")
    with pytest.raises(ValueError, match="weight: expected an attribute name, got 'a.b'"):
        sct.register_linear(Plain, weight="a.b")
    with pytest.raises(ValueError, match="bias: expected an attribute name or None, got 3"):
        sct.register_linear(Plain, bias=3)
    with pytest.raises(ValueError, match="orientation: expected 'out_in'.*got 'rows'"):
        sct.register_linear(Plain, orientation="rows")
    assert Plain not in _registry._BY_CLASS


def test_malformed_registered_modules_are_kept_with_the_reason(gen, registered):
    bad = Plain(4, 3, gen)
    bad.w = torch.nn.Parameter(torch.randn(2, 3, 4, dtype=torch.float64))
    with pytest.warns(UserWarning, match="no layer was replaced: every matched layer was kept dense"):
        report = sct.sketch_model(torch.nn.Sequential(bad), low_rank=1)
    assert len(report) == 0 and "Plain.w: expected a 2-D weight matrix, got (2, 3, 4)" in report.kept[0].reason


def test_subclasses_of_registered_types_are_skipped_not_converted(gen):
    class Special(torch.nn.Linear):
        pass

    model = torch.nn.Sequential(Special(8, 8), torch.nn.Linear(8, 8))
    report = sct.sketch_model(model, low_rank=2)
    assert list(report) == ["1"] and type(model[0]) is Special
    assert report.skipped[0][0] == "0" and "Special is a subclass of Linear" in report.skipped[0][1]
    assert "register_linear(Special)" in report.skipped[0][1]


class TiedLM(torch.nn.Module):
    def __init__(self, vocab, width):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.hidden = torch.nn.Linear(width, width)
        self.head = torch.nn.Linear(width, vocab, bias=False)
        self.head.weight = self.embed.weight  # tie_word_embeddings

    def forward(self, ids):
        return self.head(torch.tanh(self.hidden(self.embed(ids))))


def test_tied_output_layers_are_kept_and_reported():
    torch.manual_seed(0)
    model = TiedLM(40, 16)
    before = sum(p.numel() for p in model.parameters())
    report = sct.sketch_model(model, param_ratio=0.5)
    assert list(report) == ["hidden"] and model.head.weight is model.embed.weight
    (kept,) = report.kept
    assert kept.name == "head" and kept.reason.startswith("tied to embed.weight")
    assert "tied to embed.weight" in str(report)
    assert sum(p.numel() for p in model.parameters()) < before  # shrinks, never grows


def test_tied_untie_converts_the_tied_layer_and_leaves_the_embedding():
    torch.manual_seed(0)
    model = TiedLM(40, 16)
    embedding = model.embed.weight.detach().clone()
    report = sct.sketch_model(model, low_rank=4, tied="untie")
    assert set(report) == {"hidden", "head"} and not report.kept
    torch.testing.assert_close(model.embed.weight.detach(), embedding, rtol=0, atol=0)
    with pytest.raises(ValueError, match="tied: expected 'keep' or 'untie', got 'share'"):
        sct.sketch_model(TiedLM(4, 4), low_rank=1, tied="share")


def test_a_module_used_twice_is_kept():
    shared = torch.nn.Linear(8, 8)
    model = torch.nn.Sequential(shared, torch.nn.ReLU(), shared, torch.nn.Linear(8, 4))
    report = sct.sketch_model(model, low_rank=2)
    assert list(report) == ["3"] and model[0] is model[2] is shared
    assert report.kept[0].name == "0" and "tied to 2.weight" in report.kept[0].reason


def test_tolerance_alone_converts_with_lowrank_linear(gen):
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    with torch.no_grad():  # low-rank weights, so that a tolerance of 0.1 saves parameters
        for layer in (model[0], model[2]):
            layer.weight.copy_(torch.randn(layer.out_features, 3, generator=gen) @ torch.randn(3, layer.in_features,
                                                                                             generator=gen))
    report = sct.sketch_model(model, tolerance=0.1)
    assert [row.kind for row in report.values()] == ["LowRankLinear", "LowRankLinear"]
    assert all(row.weight_error <= 0.1 and row.rank == 3 for row in report.values())
    assert "weight err" in str(report) and "relative weight error" in str(report)
    ratio = sct.sketch_model(torch.nn.Sequential(torch.nn.Linear(16, 16)), param_ratio=0.5)
    assert ratio["0"].kind == "LowRankLinear" and ratio["0"].rank == 4
    sized = sct.sketch_model(torch.nn.Sequential(torch.nn.Linear(16, 16)), 2, 1)  # num_terms given: SKLinear
    assert sized["0"].kind == "SKLinear"


def test_conv2d_without_num_terms_says_so():
    with pytest.raises(ValueError, match="num_terms: expected an integer ≥ 1 for layer='sklinear', got None"):
        sct.sketch_model(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3)), low_rank=1, conv2d=True)


def test_core_calls_on_tensors_that_require_grad_name_the_argument_and_the_torch_function():
    x, S, U = torch.randn(4, 6), torch.randn(6, 2), torch.randn(2, 3)
    for name, args in (("x", (x.requires_grad_(), S, U)), ("S", (x.detach(), torch.nn.Parameter(S), U)),
                       ("U", (x.detach(), S, torch.nn.Parameter(U)))):
        with pytest.raises(BufferError, match=re.escape(f"{name}: expected a tensor that does not require gradient")
                           ) as info:
            sketchcore.sketched_matmul(*args)
        assert "sketchcore.torch.sketched_linear" in str(info.value) and f"{name}.detach()" in str(info.value)
    y = sketchcore.sketched_matmul(x.detach(), S, U)  # the suggested fix works and is exact
    torch.testing.assert_close(y, (x.detach() @ S) @ U)
