"""sketchcore.torch.low_rank_activations: the full-width outputs of LowRankLinear layers that
autograd saves are dropped after the forward and recomputed from the layers' rank-wide Z; the
gradients are the same as without the mode."""
import pytest
import torch
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef

from sketchcore.torch import LowRankLinear, low_rank_activations


def _model(inner):
    torch.manual_seed(0)
    return nn.Sequential(LowRankLinear(32, 96, 8, inner_activation=inner, dtype=torch.float64), nn.SiLU(),
                         LowRankLinear(96, 32, 8, inner_activation=inner, activation="gelu", dtype=torch.float64),
                         nn.Tanh())


def _forward(model, x, memory_mode):
    outputs = []
    handle = model[0].register_forward_hook(lambda m, i, y: outputs.append(StorageWeakRef(y.untyped_storage())))
    if memory_mode:
        with low_rank_activations():
            loss = model(x).square().sum()
    else:
        loss = model(x).square().sum()
    handle.remove()
    return loss, outputs[0]


@pytest.mark.parametrize("inner", ["silu", "none"])
def test_outputs_are_dropped_and_gradients_unchanged(inner):
    x = torch.randn(16, 32, dtype=torch.float64, requires_grad=True)
    model = _model(inner)
    loss, kept = _forward(model, x, memory_mode=False)
    assert not kept.expired()  # the SiLU keeps the first layer's 16 × 96 output
    want = torch.autograd.grad(loss, [x, *model.parameters()])
    loss, dropped = _forward(model, x, memory_mode=True)
    assert dropped.expired()  # ... which the memory mode let go, keeping only the layer's 16 × 8 Z
    got = torch.autograd.grad(loss, [x, *model.parameters()])
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-13, atol=1e-13)


def test_views_of_an_output_are_recomputed_in_place():
    torch.manual_seed(1)
    layer = LowRankLinear(12, 24, 4, inner_activation="gelu", dtype=torch.float64)
    x = torch.randn(5, 12, dtype=torch.float64, requires_grad=True)

    def f():
        v = layer(x).view(5, 4, 6).transpose(1, 2)  # a saved view, as attention's value states are
        return (torch.sigmoid(v) * v).sum()

    want = torch.autograd.grad(f(), [x, layer.S, layer.U, layer.bias])
    with low_rank_activations():
        loss = f()
    for g, w in zip(torch.autograd.grad(loss, [x, layer.S, layer.U, layer.bias]), want):
        torch.testing.assert_close(g, w, rtol=1e-13, atol=1e-13)


def test_dropout_layers_and_outside_the_region_are_left_alone():
    layer = LowRankLinear(8, 16, 2, dropout=0.5)
    x = torch.randn(4, 8)
    captured = []
    layer.register_forward_hook(lambda m, i, y: captured.append(StorageWeakRef(y.untyped_storage())))
    with low_rank_activations():
        loss = torch.nn.functional.silu(layer(x)).sum()
    assert not captured[0].expired()  # dropout's mask is not recomputed: the output stays saved
    loss.backward()
