"""sketchcore.torch.low_rank_activations on tensors derived from LowRankLinear outputs by
elementwise and shape functions (a LLaMA MLP's SiLU(gate)·up, the rotary embedding of q and k):
they are dropped after the forward and recomputed, each recipe once per backward; gradients are
those without the mode; in-place changes never give a wrong gradient; functions off the
allowlist keep their outputs."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st
from torch.multiprocessing.reductions import StorageWeakRef

from sketchcore.torch import LowRankLinear, low_rank_activations
from sketchcore.torch.ops import _memory_recipes, _ops


def _mlp(d, hidden, rank, dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    return [LowRankLinear(d, hidden, rank, inner_activation="silu", dtype=dtype),
            LowRankLinear(d, hidden, rank, inner_activation="silu", dtype=dtype),
            LowRankLinear(hidden, d, rank, inner_activation="silu", dtype=dtype)]


def _mlp_forward(layers, x, watch=None):
    gate, up, down = layers
    g = F.silu(gate(x))
    h = g * up(x)
    if watch is not None:
        watch += [StorageWeakRef(g.untyped_storage()), StorageWeakRef(h.untyped_storage())]
    return down(h).square().sum()


def _params(layers):
    return [p for layer in layers for p in layer.parameters()]


@settings(max_examples=12, deadline=None)
@given(rows=st.integers(1, 9), d=st.integers(2, 20), hidden=st.integers(2, 40), rank=st.integers(1, 6))
def test_mlp_products_are_dropped_and_gradients_unchanged(rows, d, hidden, rank):
    layers = _mlp(d, hidden, rank)
    x = torch.randn(rows, d, dtype=torch.float64, requires_grad=True)
    want = torch.autograd.grad(_mlp_forward(layers, x), [x, *_params(layers)])
    watch = []
    with low_rank_activations():
        loss = _mlp_forward(layers, x, watch)
    assert all(ref.expired() for ref in watch)  # SiLU(gate) and SiLU(gate)·up were not kept
    got = torch.autograd.grad(loss, [x, *_params(layers)])
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


def _rotary(q, cos, sin):
    half = q.shape[-1] // 2
    rotated = torch.cat((-q[..., half:], q[..., :half]), dim=-1)
    return q * cos + rotated * sin


def _attention(q_proj, k_proj, v_proj, x, heads, watch=None):
    batch, length, _ = x.shape
    shape = (batch, length, heads, -1)
    q, k, v = (p(x).view(shape).transpose(1, 2) for p in (q_proj, k_proj, v_proj))
    angles = torch.arange(length, dtype=x.dtype)[:, None] * torch.linspace(0.1, 1.0, q.shape[-1], dtype=x.dtype)
    q, k = _rotary(q, angles.cos(), angles.sin()), _rotary(k, angles.cos(), angles.sin())
    if watch is not None:
        watch += [StorageWeakRef(q.untyped_storage()), StorageWeakRef(k.untyped_storage())]
    return F.scaled_dot_product_attention(q, k, v, is_causal=True).square().sum()


def test_rotary_query_and_key_are_recomputed():
    torch.manual_seed(2)
    projections = [LowRankLinear(24, 24, 4, inner_activation="silu", dtype=torch.float64) for _ in range(3)]
    x = torch.randn(2, 7, 24, dtype=torch.float64, requires_grad=True)
    params = [x, *_params(projections)]
    want = torch.autograd.grad(_attention(*projections, x, heads=3), params)
    watch = []
    with low_rank_activations():
        loss = _attention(*projections, x, heads=3, watch=watch)
    assert all(ref.expired() for ref in watch)  # the rotated q and k that attention saved were let go
    for g, w in zip(torch.autograd.grad(loss, params), want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


def test_each_recipe_is_computed_once_per_backward(monkeypatch):
    layers = _mlp(6, 20, 3)
    calls = []
    compute = _memory_recipes.LayerRecipe._compute
    monkeypatch.setattr(_memory_recipes.LayerRecipe, "_compute", lambda self: calls.append(self) or compute(self))
    x = torch.randn(5, 6, dtype=torch.float64, requires_grad=True)
    want = torch.autograd.grad(_mlp_forward(layers, x), [x, *_params(layers)])
    with low_rank_activations():
        loss = _mlp_forward(layers, x)
    assert calls == []  # nothing recomputed in the forward (reading a layer's Z recomputes nothing)
    got = torch.autograd.grad(loss, [x, *_params(layers)], retain_graph=True)
    assert len(calls) == len({id(r) for r in calls}) == 3  # gate, up and down (read by square), once each
    assert all(r.cached is None for r in calls)  # and dropped after their last use
    again = torch.autograd.grad(loss, [x, *_params(layers)])  # a retained graph: recomputed again
    for g, g2, w in zip(got, again, want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(g2, w, rtol=1e-12, atol=1e-12)


def test_without_the_cache_gradients_are_the_same(monkeypatch):
    monkeypatch.setattr(_memory_recipes, "CACHE_ACROSS_UNPACKS", False)
    layers = _mlp(6, 20, 3, seed=3)
    x = torch.randn(5, 6, dtype=torch.float64, requires_grad=True)
    want = torch.autograd.grad(_mlp_forward(layers, x), [x, *_params(layers)])
    with low_rank_activations():
        loss = _mlp_forward(layers, x)
    for g, w in zip(torch.autograd.grad(loss, [x, *_params(layers)]), want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


def test_an_output_changed_in_place_before_it_is_saved_is_kept():
    torch.manual_seed(4)
    layer = LowRankLinear(8, 12, 2, dtype=torch.float64)
    x = torch.randn(3, 8, dtype=torch.float64, requires_grad=True)

    def f(watch=None):
        y = layer(x) * 2.0  # a derived recipe ...
        y.add_(1.0)  # ... which this invalidates
        if watch is not None:
            watch.append(StorageWeakRef(y.untyped_storage()))
        return torch.sigmoid(y * y).sum()

    want = torch.autograd.grad(f(), [x, layer.S, layer.U])
    watch = []
    with low_rank_activations():
        loss = f(watch)
    assert not watch[0].expired()  # kept as it is: its recipe no longer gives its value
    for g, w in zip(torch.autograd.grad(loss, [x, layer.S, layer.U]), want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


def test_an_output_changed_in_place_after_it_was_saved_still_gives_the_forwards_gradient():
    torch.manual_seed(5)
    layer = LowRankLinear(8, 12, 2, dtype=torch.float64)
    x = torch.randn(3, 8, dtype=torch.float64, requires_grad=True)
    want = torch.autograd.grad(F.silu(layer(x)).sum(), [x, layer.S, layer.U])
    with low_rank_activations():
        y = layer(x)
        loss = F.silu(y).sum()
    y.mul_(3.0)  # after SiLU saved it: the recipe recomputes the value SiLU read
    for g, w in zip(torch.autograd.grad(loss, [x, layer.S, layer.U]), want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


def test_a_constant_changed_in_place_after_the_forward_raises():
    layer = LowRankLinear(8, 12, 2, dtype=torch.float64)
    shift = torch.rand(12, dtype=torch.float64)
    with low_rank_activations():  # the sum saves nothing: only the recipe of tanh's saved output reads `shift`
        loss = torch.tanh(layer(torch.randn(3, 8, dtype=torch.float64)) + shift).sum()
    shift.add_(1.0)
    with pytest.raises(RuntimeError, match=r"recomputed activation reads \(shape \(12,\).*expected version 0, got 1"):
        loss.backward()


def test_a_kept_tensor_changed_in_place_after_it_was_saved_raises_as_without_the_mode():
    x = torch.randn(4, dtype=torch.float64, requires_grad=True)
    with low_rank_activations():
        e = torch.exp(x * 1.0)  # exp saves its output, which nothing recomputes
        loss = e.sum()
    e.add_(1.0)
    with pytest.raises(RuntimeError, match=r"modified in place: expected version 0, got 1"):
        loss.backward()


def test_functions_off_the_allowlist_keep_their_outputs():
    layer = LowRankLinear(8, 12, 2, dtype=torch.float64)
    x = torch.randn(3, 8, dtype=torch.float64, requires_grad=True)
    want = torch.autograd.grad(F.silu(torch.cumsum(layer(x), dim=1)).sum(), [x, layer.S])
    with low_rank_activations():
        c = torch.cumsum(layer(x), dim=1)
        kept = StorageWeakRef(c.untyped_storage())
        loss = F.silu(c).sum()
    del c
    assert not kept.expired()  # cumsum is not watched: its output stays saved
    for g, w in zip(torch.autograd.grad(loss, [x, layer.S]), want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


def test_bfloat16_autocast_gives_the_gradients_of_the_plain_forward(monkeypatch):
    # the rule that runs the layers in bfloat16 (their outputs are then the ops' own, registered),
    # whatever this CPU's core chose (as tests/torch_adapters/test_autocast_eager.py does)
    monkeypatch.setattr(_ops, "_CPU_BF16_GEMM", True)
    layers = _mlp(16, 48, 4, dtype=torch.float32, seed=6)
    x = torch.randn(10, 16, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        plain = _mlp_forward(layers, x)
    want = torch.autograd.grad(plain, [x, *_params(layers)])
    computed = []
    value = _memory_recipes.Recipe.value
    monkeypatch.setattr(_memory_recipes.Recipe, "value", lambda self: computed.append(self) or value(self))
    with torch.autocast("cpu", dtype=torch.bfloat16), low_rank_activations():
        loss = _mlp_forward(layers, x)
    got = torch.autograd.grad(loss, [x, *_params(layers)])
    # the layers' outputs and what is derived from them, in bfloat16; x (kept: autograd saves it for
    # the backward of its cast) as the root of the recipe of autocast's bfloat16 copy of it
    assert {type(r).__name__ for r in computed} == {"LayerRecipe", "DerivedRecipe", "KeptRecipe"}
    assert {r.dtype for r in computed if not isinstance(r, _memory_recipes.KeptRecipe)} == {torch.bfloat16}
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        assert ((g.double() - w.double()).norm() / w.double().norm()).item() < 1e-2


def test_a_functions_own_saved_output_is_recomputed():
    torch.manual_seed(7)
    layer = LowRankLinear(8, 12, 2, dtype=torch.float64)
    x = torch.randn(3, 8, dtype=torch.float64, requires_grad=True)
    want = torch.autograd.grad(torch.sigmoid(torch.tanh(layer(x))).sum(), [x, layer.S, layer.U])
    with low_rank_activations():
        t = torch.tanh(layer(x))  # tanh saves t, before the mode sees t: the pack adopts its recipe after
        s = torch.sigmoid(t)
        watch = [StorageWeakRef(t.untyped_storage()), StorageWeakRef(s.untyped_storage())]
        loss = s.sum()
    del t, s
    assert all(ref.expired() for ref in watch)
    for g, w in zip(torch.autograd.grad(loss, [x, layer.S, layer.U]), want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


def test_views_and_copies_of_derived_tensors_are_recomputed():
    torch.manual_seed(8)
    layer = LowRankLinear(10, 24, 3, inner_activation="gelu", dtype=torch.float64)
    x = torch.randn(5, 10, dtype=torch.float64, requires_grad=True)

    def f(watch=None):
        h = F.silu(layer(x)) * 2.0  # derived
        v = h.view(5, 4, 6).transpose(1, 2)  # a view of it, saved below as it is
        c = v.contiguous()  # a copy of that view: derived again
        if watch is not None:
            watch += [StorageWeakRef(h.untyped_storage()), StorageWeakRef(c.untyped_storage())]
        return (torch.sigmoid(v) * v).sum() + torch.tanh(c.reshape(5, 24)).sum()

    want = torch.autograd.grad(f(), [x, layer.S, layer.U])
    watch = []
    with low_rank_activations():
        loss = f(watch)
    assert all(ref.expired() for ref in watch)
    for g, w in zip(torch.autograd.grad(loss, [x, layer.S, layer.U]), want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)



def test_a_region_spanning_many_steps_does_not_keep_every_steps_recipes():
    # Each step registers two recipes (the layer's output and its SiLU); the registry drops the
    # entries of dead storages, so 700 steps in one region do not keep 1,400 entries (and their Z).
    from sketchcore.torch.ops import _memory_mode

    torch.manual_seed(0)
    layer = LowRankLinear(16, 32, 4, inner_activation="silu")
    with low_rank_activations():
        for _ in range(700):
            F.silu(layer(torch.randn(3, 16))).sum().backward()
        assert len(_memory_mode._state.recipes) <= _memory_mode._PRUNE_FROM + 2


def test_an_inference_tensor_constant_leaves_the_output_kept():
    # A table made under inference_mode has no version counter to guard a recipe by: the sum is
    # kept as it is (the forward must not raise), and the gradients are the plain ones.
    torch.manual_seed(0)
    layer = LowRankLinear(16, 32, 4, inner_activation="silu")
    with torch.inference_mode():
        table = torch.randn(3, 32)
    x = torch.randn(3, 16)
    with low_rank_activations():
        y = torch.tanh(layer(x) + table)
    y.sum().backward()
    in_the_mode = [p.grad.clone() for p in layer.parameters()]
    layer.zero_grad()
    torch.tanh(layer(x) + table).sum().backward()
    for plain, got in zip((p.grad for p in layer.parameters()), in_the_mode):
        torch.testing.assert_close(got, plain)
