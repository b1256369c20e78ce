"""What a converted model really does (issue 24): sketched layers run inside torch's fused
modules in eval/no_grad, state_dicts move between sketchcore and Panther's layout with
``strict=True``, loading never changes a configuration silently, ``.weight`` is a derived,
read-only value, and LowRankLinear has dropout."""
from __future__ import annotations

import io
import math
import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import sketchcore.torch as sct  # noqa: E402
from sketchcore.torch.layers._layer_state import LEGACY_KEY  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


def count_calls(model: nn.Module, kinds=(sct.LowRankLinear, sct.SKLinear)) -> list[str]:
    calls: list[str] = []
    for name, module in model.named_modules():
        if isinstance(module, kinds):
            module.register_forward_hook(lambda m, i, o, name=name: calls.append(name))
    return calls


# -- 1. no silent dense fallback -------------------------------------------------------------
@pytest.mark.parametrize("layer", ["lowrank", "sklinear"])
@pytest.mark.parametrize("padding_mask", [False, True])
def test_encoder_in_eval_no_grad_runs_the_sketched_layers(layer, padding_mask):
    torch.manual_seed(0)
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True), 2,
                                    enable_nested_tensor=True)
    report = sct.sketch_model(encoder, 1, 8, layer=layer)
    assert len(report) == 4
    calls = count_calls(encoder)
    x = torch.randn(3, 11, 64)
    mask = torch.zeros(3, 11, dtype=torch.bool)
    mask[1, 6:] = True
    kwargs = {"src_key_padding_mask": mask} if padding_mask else {}
    encoder.eval()
    with torch.no_grad():
        fast = encoder(x, **kwargs)  # torch's fused path would read .weight and skip the modules
    assert sorted(set(calls)) == sorted(report) and len(calls) == 4
    encoder.train()  # dropout is 0: the training-mode path computes the same function
    slow = encoder(x, **kwargs)
    keep = ~mask if padding_mask else torch.ones(3, 11, dtype=torch.bool)
    torch.testing.assert_close(fast[keep], slow[keep].detach(), rtol=1e-5, atol=1e-5)


def test_decoder_and_a_bare_multihead_attention_out_projection_run_sketched_or_correctly():
    torch.manual_seed(1)
    decoder = nn.TransformerDecoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    sct.sketch_model(decoder, low_rank=4, layer="lowrank")
    calls = count_calls(decoder)
    x, memory = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    decoder.eval()
    with torch.no_grad():
        y = decoder(x, memory)
    assert sorted(calls) == ["linear1", "linear2"]
    decoder.train()
    torch.testing.assert_close(y, decoder(x, memory).detach(), rtol=1e-5, atol=1e-5)
    # An MHA whose out_proj a user replaced by hand: its fused path reads out_proj.weight; the
    # DerivedWeight makes it take the exact path with the dense equivalent instead.
    mha = nn.MultiheadAttention(32, 4, batch_first=True).eval()
    expected = mha(x, x, x)[0].detach()
    low = sct.LowRankLinear.from_linear(mha.out_proj, 32)  # full rank: the same map
    mha.out_proj = low
    with torch.no_grad():
        torch.testing.assert_close(mha(x, x, x)[0], expected, rtol=1e-5, atol=1e-5)


# -- 2. Panther's state_dicts ----------------------------------------------------------------
class PantherLayout(nn.Module):
    """The keys, shapes and parameter/buffer split of Panther's SKLinear (U1s, U2s buffers;
    S1s, S2s, bias parameters), with Panther's forward formula in float64."""

    def __init__(self, n_in: int, n_out: int, T: int, k: int):
        super().__init__()
        sign = lambda *shape: (torch.randint(0, 2, shape) * 2 - 1).double() / math.sqrt(k)  # noqa: E731
        self.register_buffer("U1s", sign(T, k, n_out))
        self.register_buffer("U2s", sign(T, n_in, k))
        self.S1s = nn.Parameter(torch.randn(T, n_in, k, dtype=torch.float64))
        self.S2s = nn.Parameter(torch.randn(T, k, n_out, dtype=torch.float64))
        self.bias = nn.Parameter(torch.randn(n_out, dtype=torch.float64))

    def forward(self, x):
        T = self.S1s.shape[0]
        return sum((x @ self.S1s[t]) @ self.U1s[t] + (x @ self.U2s[t]) @ self.S2s[t] for t in range(T)) / (2 * T) + self.bias


def test_panther_state_dicts_load_strictly_both_ways():
    torch.manual_seed(2)
    panther = PantherLayout(24, 16, 2, 3)
    ours = sct.SKLinear(24, 16, 2, 3, dtype=torch.float64, activation="relu")
    ours.load_state_dict(panther.state_dict(), strict=True)
    assert ours.activation == "relu"  # a state_dict without configuration keeps the layer's own
    x = torch.randn(5, 24, dtype=torch.float64)
    torch.testing.assert_close(ours(x), torch.relu(panther(x)), rtol=1e-12, atol=1e-12)
    back = PantherLayout(24, 16, 2, 3)
    buffer = io.BytesIO()
    torch.save(sct.SKLinear(24, 16, 2, 3, dtype=torch.float64).state_dict(), buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    back.load_state_dict(saved, strict=True)  # no extra key for Panther's layer to reject
    assert saved._metadata[""]["sketchcore"]["num_terms"] == 2  # the configuration travelled as metadata


def test_restore_model_takes_a_state_dict_without_metadata():
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(20, 30), nn.ReLU(), nn.Linear(30, 10, bias=False))
    sct.sketch_model(model, 1, 3, include=["0"])
    sct.sketch_model(model, low_rank=4, layer="lowrank", include=["2"])
    plain = {k: v.clone() for k, v in model.state_dict().items()}  # a plain dict: no metadata, as Panther's
    fresh = sct.restore_model(nn.Sequential(nn.Linear(20, 30), nn.ReLU(), nn.Linear(30, 10, bias=False)), plain)
    assert isinstance(fresh[0], sct.SKLinear) and isinstance(fresh[2], sct.LowRankLinear)
    assert (fresh[0].num_terms, fresh[0].low_rank, fresh[2].rank, fresh[2].bias) == (1, 3, 4, None)
    x = torch.randn(4, 20)
    torch.testing.assert_close(fresh(x), model(x), rtol=0, atol=0)


# -- 3. configuration never changes silently -------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda **kw: sct.SKLinear(12, 8, 1, 2, **kw),
    lambda **kw: sct.LowRankLinear(12, 8, 3, **kw),
])
def test_a_differing_saved_configuration_is_an_error_naming_both(make):
    saved = make(activation="none", dropout=0.25).state_dict()
    target = make(activation="relu")
    before = {k: v.clone() for k, v in target.state_dict().items()}
    with pytest.raises(RuntimeError, match=r"activation='none' \(this layer: 'relu'\), dropout=0.25 \(this layer: 0.0\)"):
        target.load_state_dict(saved)
    assert target.activation == "relu" and target.dropout == 0.0
    target.load_state_dict(dict(saved))  # tensors only: accepted, configuration kept
    assert target.activation == "relu"
    assert any(not torch.equal(before[k], v) for k, v in target.state_dict().items())
    same = make(activation="none", dropout=0.25)
    same.load_state_dict(saved)  # the same configuration loads


def test_checkpoints_of_sketchcore_0_1_with_extra_state_still_load_and_are_checked():
    layer = sct.SKLinear(12, 8, 1, 2, activation="gelu")
    legacy = dict(layer.state_dict())
    legacy[LEGACY_KEY] = dict(layer.layer_config())
    del legacy[LEGACY_KEY]["init"]
    other = sct.SKLinear(12, 8, 1, 2, activation="gelu")
    other.load_state_dict(legacy, strict=True)
    assert torch.equal(other.S1s, layer.S1s)
    with pytest.raises(RuntimeError, match="activation='gelu' \\(this layer: 'none'\\)"):
        sct.SKLinear(12, 8, 1, 2).load_state_dict(legacy)
    model = nn.Sequential(nn.Linear(12, 8))
    sct.restore_model(model, {f"0.{k}": v for k, v in legacy.items()})
    assert isinstance(model[0], sct.SKLinear) and model[0].activation == "gelu"


# -- 4. .weight is derived and read-only ------------------------------------------------------
def test_weight_metadata_costs_no_computation_and_values_are_kept_while_held(monkeypatch):
    layer = sct.LowRankLinear(16, 12, 3, dtype=torch.float64)
    computed = []
    original = sct.LowRankLinear._dense_weight
    monkeypatch.setattr(sct.LowRankLinear, "_dense_weight", lambda self: computed.append(1) or original(self))
    w = layer.weight
    assert (w.shape, w.dtype, w.device.type, w.requires_grad, w.dim()) == ((12, 16), torch.float64, "cpu", True, 2)
    assert torch.overrides.has_torch_function((w,))  # what turns torch's fused fast paths off
    assert computed == []
    with torch.no_grad():
        first = w @ torch.ones(16, dtype=torch.float64)
        second = w.sum()
        assert layer.weight is w and len(computed) == 1  # one computation while held
        torch.testing.assert_close(first, (layer.S @ layer.U).sum(0), rtol=1e-12, atol=1e-12)
        layer.S.mul_(2)  # the factors changed: the next use recomputes
        torch.testing.assert_close(w.sum(), 2 * second, rtol=1e-12, atol=1e-12)
        assert len(computed) == 2


def test_weight_is_differentiable_to_the_factors():
    layer = sct.SKLinear(10, 6, 2, 2, dtype=torch.float64)
    (layer.weight ** 2).sum().backward()
    W = layer._dense_weight().detach().requires_grad_()
    expected = torch.autograd.grad((W ** 2).sum(), W)[0]  # d/dS1_t of Σ W² through W = Σ U1ᵀS1ᵀ/(2T)
    torch.testing.assert_close(layer.S1s.grad[0], (expected.t() @ layer.U1s[0].t()) / 4, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("write, what", [
    (lambda w: nn.init.zeros_(w), "zero_()"),
    (lambda w: w.copy_(torch.zeros_like(w.detach())), "copy_()"),
    (lambda w: w.__setitem__(0, 1.0), "__setitem__()"),
    (lambda w: torch.add(torch.zeros(6, 10), 1, out=w), "add()"),
    (lambda w: setattr(w, "data", torch.zeros(6, 10)), "an assignment to .data"),
    (lambda w: w.requires_grad_(False), "requires_grad_()"),
])
def test_writes_to_weight_raise_and_change_nothing(write, what):
    layer = sct.SKLinear(10, 6, 1, 2)
    before = layer.weight.detach().clone()
    with pytest.raises(RuntimeError, match=f"SKLinear.weight: expected no write .*got {what}"):
        write(layer.weight)
    torch.testing.assert_close(layer.weight.detach(), before, rtol=0, atol=0)


def test_assigning_weight_raises_a_clear_error():
    layer, embedding = sct.LowRankLinear(8, 20, 2), nn.Embedding(20, 8)
    with pytest.raises(AttributeError, match="LowRankLinear.weight: expected no assignment .* got a Parameter"):
        layer.weight = embedding.weight  # what transformers' tie_weights does
    with pytest.raises(AttributeError, match="got a Tensor"):
        layer.weight = torch.zeros(20, 8)


def test_conv_weight_is_derived_too():
    conv = sct.SKConv2d(3, 5, (3, 3), num_terms=1, low_rank=2, dtype=torch.float64)
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    torch.testing.assert_close(conv(x), nn.functional.conv2d(x, conv.weight, conv.bias, padding=1),
                               rtol=1e-10, atol=1e-10)
    with pytest.raises(RuntimeError, match=r"SKConv2d.weight: expected no write .* use SKConv2d.to_conv2d\(\)"):
        nn.init.kaiming_uniform_(conv.weight)


# -- LowRankLinear dropout -------------------------------------------------------------------
def test_lowrank_dropout_zeroes_a_fraction_p_in_training_and_rescales_the_rest():
    torch.manual_seed(4)
    layer = sct.LowRankLinear(64, 256, 8, dropout=0.3, dtype=torch.float64)
    x = torch.randn(64, 64, dtype=torch.float64)
    layer.eval()
    clean = layer(x)
    layer.train()
    dropped = layer(x)
    zero = dropped == 0
    assert abs(zero.double().mean().item() - 0.3) < 0.02  # 16384 draws: 5 standard deviations ≈ 0.018
    torch.testing.assert_close(dropped[~zero], clean[~zero] / 0.7, rtol=1e-12, atol=1e-12)
    dropped.sum().backward()  # the backward regenerates the same mask
    expected = (x.t() @ ((~zero).double() / 0.7)) @ layer.U.t()
    torch.testing.assert_close(layer.S.grad, expected, rtol=1e-10, atol=1e-10)


def test_sketch_model_passes_dropout_to_lowrank_layers_and_refuses_bad_ones():
    model = nn.Sequential(nn.Linear(16, 16))
    sct.sketch_model(model, low_rank=4, layer="lowrank", dropout=0.1)
    assert model[0].dropout == 0.1
    for bad in (-0.1, 1.5, True, "0.1"):
        with pytest.raises(ValueError, match=f"LowRankLinear: dropout: expected a probability in \\[0, 1\\], got {bad!r}"):
            sct.LowRankLinear(4, 4, 1, dropout=bad)
