"""The inner activation through torch: the custom operators (gradcheck, second order, opcheck,
torch.compile, torch.func), the eager path, LowRankLinear(inner_activation=...) (config, repr,
state_dict, restore_model) and sketch_model's pretraining conversion and its refusals."""
import io
import math

import pytest
import torch
from torch import nn

import sketchcore.torch as sct
from sketchcore.torch import LowRankLinear, restore_model, sketch_model

ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu")
_TORCH_ACT = {"none": lambda z: z, "relu": torch.relu, "gelu": nn.functional.gelu,
              "gelu_tanh": lambda z: nn.functional.gelu(z, approximate="tanh"), "silu": nn.functional.silu}


def peer(x, S, U, bias, inner, activation="none"):
    """The layer in plain torch ops (two matmuls and σ), float64 where its inputs are."""
    Sp = S if S.dim() == 2 else torch.cat(list(S), dim=1)
    Up = U if U.dim() == 2 else torch.cat(list(U), dim=0)
    y = _TORCH_ACT[inner](x @ Sp) @ Up
    return _TORCH_ACT[activation](y if bias is None else y + bias)


@pytest.mark.parametrize("inner", ["relu", "gelu", "gelu_tanh", "silu"])
def test_gradcheck_and_gradgradcheck(inner):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(3, 2, 7, dtype=torch.float64, generator=g, requires_grad=True)
    S = torch.randn(2, 7, 3, dtype=torch.float64, generator=g, requires_grad=True)
    U = torch.randn(2, 3, 5, dtype=torch.float64, generator=g, requires_grad=True)
    b = torch.randn(5, dtype=torch.float64, generator=g, requires_grad=True)
    if inner == "relu":  # keep the pre-activations away from relu's kink, where finite differences lie
        with torch.no_grad():
            S.add_(torch.sign(S) * 0.05)

    def f(x, S, U, b):
        return sct.sketched_linear(x, S, U, b, activation="gelu", scale=0.5, inner_activation=inner)

    assert torch.autograd.gradcheck(f, (x, S, U, b))
    if inner != "relu":
        assert torch.autograd.gradgradcheck(f, (x, S, U, b))


def test_eager_and_operator_paths_equal_the_plain_torch_peer():
    torch.manual_seed(0)
    x = torch.randn(64, 24, dtype=torch.float64)
    S = torch.randn(24, 9, dtype=torch.float64, requires_grad=True)
    U = torch.randn(9, 11, dtype=torch.float64, requires_grad=True)
    b = torch.randn(11, dtype=torch.float64, requires_grad=True)
    want = peer(x, S, U, b, "silu")
    want_grads = torch.autograd.grad(want.square().sum(), (S, U, b))
    eager = sct.sketched_linear(x, S, U, b, inner_activation="silu")
    y, _ = torch.ops.sketchcore.sketched_linear(x, S, U, b, "none", 1.0, 0.0, torch.tensor(0), "silu")
    for got in (eager, y):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        for g, w in zip(torch.autograd.grad(got.square().sum(), (S, U, b)), want_grads):
            torch.testing.assert_close(g, w, rtol=1e-11, atol=1e-11)


def test_opcheck_with_inner_activation():
    x = torch.randn(5, 8)
    S = torch.randn(2, 8, 3, requires_grad=True)
    U = torch.randn(2, 3, 4, requires_grad=True)
    b = torch.randn(4, requires_grad=True)
    args = (x, S, U, b, "relu", 0.5, 0.0, torch.tensor(3), "silu")
    assert set(torch.library.opcheck(torch.ops.sketchcore.sketched_linear.default, args).values()) == {"SUCCESS"}
    y, z = torch.ops.sketchcore.sketched_linear(x, S.detach(), U.detach(), b.detach(), "relu", 0.5, 0.0,
                                                torch.tensor(3), "silu")
    bwd = torch.library.opcheck(torch.ops.sketchcore.sketched_linear_backward.default,
                                (torch.ones_like(y), x, S.detach(), U.detach(), z, b.detach(), "relu", 0.5, 0.0,
                                 torch.tensor(3), [True, True, True, True], "silu"),
                                test_utils=("test_schema", "test_faketensor"))
    assert set(bwd.values()) == {"SUCCESS"}, bwd


def test_torch_func_grad_and_vmap():
    torch.manual_seed(2)
    x = torch.randn(4, 6, 10, dtype=torch.float64)
    S = torch.randn(10, 3, dtype=torch.float64)
    U = torch.randn(3, 5, dtype=torch.float64)

    def loss(S, xi):
        return sct.sketched_linear(xi, S, U, inner_activation="gelu").pow(2).sum()

    per_sample = torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0))(S, x)
    for i in range(4):
        Si = S.clone().requires_grad_()
        (want,) = torch.autograd.grad(peer(x[i], Si, U, None, "gelu").pow(2).sum(), Si)
        torch.testing.assert_close(per_sample[i], want, rtol=1e-11, atol=1e-11)


def test_unknown_inner_activation_is_refused_with_the_valid_names():
    x, S, U = torch.ones(2, 3), torch.ones(3, 2), torch.ones(2, 4)
    with pytest.raises(ValueError, match=r"sketched_linear: inner_activation: expected one of \('none', 'relu', "
                                         r"'gelu', 'gelu_tanh', 'silu'\), got 'swish'"):
        sct.sketched_linear(x, S, U, inner_activation="swish")
    with pytest.raises(ValueError, match=r"LowRankLinear: inner_activation: expected one of .* got 'tanh'"):
        LowRankLinear(3, 4, 2, inner_activation="tanh")


def test_layer_is_the_peer_and_keeps_its_configuration():
    torch.manual_seed(3)
    layer = LowRankLinear(20, 9, 5, activation="relu", inner_activation="silu", dtype=torch.float64)
    x = torch.randn(4, 20, dtype=torch.float64)
    torch.testing.assert_close(layer(x), peer(x, layer.S, layer.U, layer.bias, "silu", "relu"), rtol=1e-12, atol=1e-12)
    assert layer.layer_config()["inner_activation"] == "silu"
    assert "inner_activation='silu'" in repr(layer)
    assert "inner_activation" not in repr(LowRankLinear(20, 9, 5))
    buffer = io.BytesIO()
    torch.save(layer.state_dict(), buffer)
    saved = torch.load(io.BytesIO(buffer.getvalue()))
    same = LowRankLinear(20, 9, 5, activation="relu", inner_activation="silu", dtype=torch.float64)
    same.load_state_dict(saved)
    torch.testing.assert_close(same(x), layer(x), rtol=0, atol=0)
    linear = LowRankLinear(20, 9, 5, activation="relu", dtype=torch.float64)
    with pytest.raises(RuntimeError, match=r"inner_activation='silu' \(this layer: 'none'\)"):
        linear.load_state_dict(saved)
    for what in ("weight", "to_linear"):
        with pytest.raises(ValueError, match=rf"LowRankLinear.{what}: expected a linear layer .* got "
                                             r"inner_activation='silu'"):
            getattr(layer, what) if what == "weight" else layer.to_linear()


def _mlp():
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))


def test_sketch_model_random_init_builds_cola_layers_with_the_dense_variance():
    torch.manual_seed(4)
    model = _mlp()
    dense_std = {name: model.get_submodule(name).weight.std().item() for name in ("0", "2")}
    report = sketch_model(model, layer="lowrank", param_ratio=0.5, init="random", inner_activation="silu",
                          exclude=["4"])
    assert set(report) == {"0", "2"} and type(model[4]) is nn.Linear
    for name in ("0", "2"):
        layer = model.get_submodule(name)
        assert isinstance(layer, LowRankLinear) and layer.inner_activation == "silu"
        assert layer.rank == 16  # the aligned rank within half of 64·128 / (64 + 128) = 21.3
        assert math.isnan(report[name].weight_error) and report[name].inner_activation == "silu"
        product_std = (layer.S @ layer.U).std().item()
        assert abs(product_std / dense_std[name] - 1) < 0.15  # the dense init's variance
        assert abs(layer.S.std().item() / layer.U.std().item() - 1) < 0.15  # balanced
    assert "LowRankLinear(σ=silu)" in str(report)
    fresh = restore_model(_mlp(), model.state_dict())
    x = torch.randn(3, 64)
    assert fresh[0].inner_activation == "silu"
    torch.testing.assert_close(fresh(x), model(x), rtol=0, atol=0)


@pytest.mark.parametrize("kwargs, message", [
    ({"init": "svd", "inner_activation": "silu"}, r"expected init='random' .* got init='svd'.* trained model"),
    ({"layer": "sklinear", "num_terms": 1, "init": "random", "inner_activation": "silu"},
     r"inner_activation: expected layer='lowrank' .* got layer='sklinear'"),
    ({"init": "random", "inner_activation": "swish"},
     r"inner_activation: expected one of \('none', 'relu', 'gelu', 'gelu_tanh', 'silu'\) or None, got 'swish'"),
    ({"layer": "sklinear", "num_terms": 1, "init": "random"}, r"init: 'random' draws LowRankLinear factors"),
    ({"init": "random", "calibration": [torch.randn(2, 64)]}, r"calibration: expected None with init='random'"),
])
def test_sketch_model_refusals(kwargs, message):
    model = _mlp()
    with pytest.raises(ValueError, match=message):
        sketch_model(model, param_ratio=0.5, **kwargs)
    assert all(type(m) is not LowRankLinear for m in model.modules())  # nothing was converted
