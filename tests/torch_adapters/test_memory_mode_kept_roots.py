"""sketchcore.torch.low_rank_activations with tensors autograd keeps anyway as roots of derived
recipes: what an RMSNorm computes elementwise from its kept input (the normalised rows, the scaled
output a layer saves) is recomputed instead of kept beside it; gradients are those without the
mode; the registry of kept tensors holds none alive; an in-place change of a root between forward
and backward raises, one before its use leaves the derived tensor kept."""
import gc

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch.multiprocessing.reductions import StorageWeakRef

from sketchcore.torch import LowRankLinear, low_rank_activations
from sketchcore.torch.ops import _memory_mode


def _norm(r, weight, watch=None):
    """LLaMA's RMSNorm: r's square is kept by pow; the normalised rows and the output are derived."""
    h = r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + 1e-6)
    out = weight * h
    if watch is not None:
        watch += [StorageWeakRef(h.untyped_storage()), StorageWeakRef(out.untyped_storage())]
    return out


def _block(layers, weight, x, watch=None):
    down, up = layers
    r = x * 1.5  # a residual stream computed in the graph (not a leaf)
    return (up(torch.nn.functional.silu(down(_norm(r, weight, watch)))) + r).square().sum()


def _layers(d, rank, seed):
    torch.manual_seed(seed)
    return (LowRankLinear(d, 2 * d, rank, inner_activation="silu", dtype=torch.float64),
            LowRankLinear(2 * d, d, rank, inner_activation="silu", dtype=torch.float64))


@settings(max_examples=10, deadline=None)
@given(rows=st.integers(1, 7), d=st.integers(2, 24), rank=st.integers(1, 5))
def test_norm_outputs_are_recomputed_from_the_kept_input_and_gradients_unchanged(rows, d, rank):
    layers = _layers(d, rank, seed=rows * 100 + d)
    weight = torch.randn(d, dtype=torch.float64, requires_grad=True)
    x = torch.randn(rows, d, dtype=torch.float64, requires_grad=True)
    params = [x, weight, *[p for layer in layers for p in layer.parameters()]]
    want = torch.autograd.grad(_block(layers, weight, x), params)
    watch = []
    with low_rank_activations():
        loss = _block(layers, weight, x, watch)
    gc.collect()
    assert all(ref.expired() for ref in watch)  # neither the normalised rows nor the norm's output was kept
    for g, w in zip(torch.autograd.grad(loss, params), want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


def test_the_registry_of_kept_tensors_keeps_none_alive():
    layers = _layers(8, 3, seed=1)
    weight = torch.randn(8, dtype=torch.float64, requires_grad=True)
    x = torch.randn(4, 8, dtype=torch.float64, requires_grad=True)
    with low_rank_activations():
        loss = _block(layers, weight, x)
        kept = list(_memory_mode._state.kept.values())
        assert any(not ref().is_leaf for ref, _ in kept)  # the residual stream, saved by pow, is registered ...
        loss.backward()  # ... and dies with the graph, though the region is still open
        del loss
        _memory_mode._state.recipes.clear()  # (the recipes' registry holds them until it is pruned)
        gc.collect()
        alive = [ref() for ref, _ in kept if ref() is not None]
        assert alive and all(t.is_leaf for t in alive)  # only the parameters and x the test holds


def test_a_region_over_many_steps_prunes_the_registry():
    layers = _layers(6, 2, seed=2)
    weight = torch.randn(6, dtype=torch.float64, requires_grad=True)
    with low_rank_activations():
        for _ in range(200):  # a few saved tensors a step: well past the first pruning
            _block(layers, weight, torch.randn(3, 6, dtype=torch.float64, requires_grad=True)).backward()
        assert len(_memory_mode._state.kept) < 2 * _memory_mode._PRUNE_FROM


def test_a_root_changed_in_place_between_forward_and_backward_raises():
    layers = _layers(8, 3, seed=3)
    weight = torch.randn(8, dtype=torch.float64, requires_grad=True)
    x = torch.randn(4, 8, dtype=torch.float64, requires_grad=True)
    with low_rank_activations():
        r = x * 1.5
        loss = layers[1](torch.nn.functional.silu(layers[0](_norm(r, weight)))).sum()
    with torch.no_grad():
        r.add_(1.0)  # the kept root of the norm's recipes
    with pytest.raises(RuntimeError, match="modified in place"):
        loss.backward()


def test_a_root_changed_before_its_use_leaves_the_derived_tensor_kept():
    layers = _layers(8, 3, seed=4)
    x = torch.randn(4, 8, dtype=torch.float64, requires_grad=True)

    def forward(watch=None):
        r = x * 1.5
        squared = r.pow(2)  # r saved by pow (a kept root) ...
        r.mul_(2.0)  # ... then changed in place: no longer what pow kept
        out = r + 1.0  # (the sum saves nothing: r is not saved again at its new version)
        if watch is not None:
            watch.append(StorageWeakRef(out.untyped_storage()))
        del squared
        return layers[1](layers[0](out)).sum()

    want = torch.autograd.grad(forward(), [x])
    watch = []
    with low_rank_activations():
        loss = forward(watch)
    gc.collect()
    assert not watch[0].expired()  # r + 1 is kept, not derived from the changed root
    for g, w in zip(torch.autograd.grad(loss, [x]), want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)
