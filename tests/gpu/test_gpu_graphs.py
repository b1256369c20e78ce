"""Models with SKLinear and LowRankLinear in every CUDA-graph mode torch documents (issue 39,
items 1 and 2): ``torch.cuda.make_graphed_callables``, ``torch.compile(mode="reduce-overhead")``
(inductor's CUDA graphs) for inference and training, a whole training step (forward, backward and
optimizer) captured in one ``torch.cuda.graph``, and a captured forward + backward replayed after
parameter updates.

What each compares against is true by construction: the eager step where the graphed procedure is
mathematically the eager one, and a *dense twin* (the same model written with ``nn.Linear`` layers
holding the same factors) run through the very same procedure — so a difference is ours, not the
procedure's. An earlier version compared make_graphed_callables to eager without initialising the
gradients: autograd then adopts the graph's static gradient buffer as ``.grad`` on the first step
(it steals a detached tensor it holds the only reference to), the next replay writes into it and
the accumulation doubles it, so the losses diverged from step 3 — with plain ``nn.Linear`` too.

Every test here needs a CUDA device and is skipped without one.
"""
import copy
import warnings

import pytest

import sketchcore

torch = pytest.importorskip("torch")
sct = pytest.importorskip("sketchcore.torch")
nn = torch.nn

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not sketchcore.build_info()["cuda"] or sketchcore.cuda_device_count() == 0
                       or not torch.cuda.is_available(), reason="needs the CUDA backend and a CUDA device"),
]

STEPS = 6
LR = 0.05


class LowRankTwin(nn.Module):
    """LowRankLinear's math with nn.Linear layers: act(x S U + b), S and U learnable."""

    def __init__(self, layer):
        super().__init__()
        self.first = nn.Linear(layer.in_features, layer.rank, bias=False)
        self.second = nn.Linear(layer.rank, layer.out_features, bias=layer.bias is not None)
        with torch.no_grad():
            self.first.weight.copy_(layer.S.t())
            self.second.weight.copy_(layer.U.t())
            if layer.bias is not None:
                self.second.bias.copy_(layer.bias)
        self.activation = layer.activation

    def forward(self, x):
        y = self.second(self.first(x))
        return {"none": y, "relu": torch.relu(y), "gelu": nn.functional.gelu(y)}[self.activation]


class SKLinearTwin(nn.Module):
    """Panther's SKLinear math with nn.Linear layers: 1/(2T) Σ_t (x S1_t) U1_t + (x U2_t) S2_t + b,
    S1 and S2 learnable, U1 and U2 fixed."""

    def __init__(self, layer):
        super().__init__()
        T = layer.num_terms

        def linear(weight, learnable):
            module = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
            with torch.no_grad():
                module.weight.copy_(weight)
            module.weight.requires_grad_(learnable)
            return module
        self.s1 = nn.ModuleList(linear(layer.S1s[t].t(), True) for t in range(T))
        self.u1 = nn.ModuleList(linear(layer.U1s[t].t(), False) for t in range(T))
        self.u2 = nn.ModuleList(linear(layer.U2s[t].t(), False) for t in range(T))
        self.s2 = nn.ModuleList(linear(layer.S2s[t].t(), True) for t in range(T))
        self.bias = nn.Parameter(layer.bias.detach().clone())
        self.activation, self.scale = layer.activation, 1.0 / (2 * T)

    def forward(self, x):
        y = sum(self.u1[t](self.s1[t](x)) + self.s2[t](self.u2[t](x)) for t in range(len(self.s1)))
        y = y * self.scale + self.bias
        return {"none": y, "relu": torch.relu(y), "gelu": nn.functional.gelu(y)}[self.activation]


def _models(kind):
    """Our model and its dense twin, on the GPU, with the same parameters."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind == "sklinear":
            layers = [sct.SKLinear(64, 96, 2, 8, activation="gelu"), sct.LowRankLinear(96, 32, 8)]
        else:
            layers = [sct.LowRankLinear(64, 96, 16, activation="relu"), sct.SKLinear(96, 32, 1, 8)]
    ours = nn.Sequential(*layers)
    twin = nn.Sequential(*[SKLinearTwin(m) if isinstance(m, sct.SKLinear) else LowRankTwin(m) for m in layers])
    return ours.cuda(), twin.cuda()


def _batches(steps=STEPS):
    gen = torch.Generator(device="cuda").manual_seed(1)
    return [(torch.randn(48, 64, device="cuda", generator=gen), torch.randn(48, 32, device="cuda", generator=gen))
            for _ in range(steps)]


def _trainable(model):
    return [p for p in model.parameters() if p.requires_grad]


def _zero_initialised_grads(model):
    """``.grad`` allocated before the first step, so autograd accumulates into it instead of
    adopting a graph's static gradient buffer (see the module docstring)."""
    for p in _trainable(model):
        p.grad = torch.zeros_like(p)


def _eager_losses(model, batches):
    optimizer = torch.optim.SGD(_trainable(model), lr=LR)
    losses = []
    for x, target in batches:
        optimizer.zero_grad(set_to_none=False)
        loss = nn.functional.mse_loss(model(x), target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return torch.tensor(losses)


def _graphed_callables_losses(model, batches):
    _zero_initialised_grads(model)
    graphed = torch.cuda.make_graphed_callables(model, (batches[0][0].clone(),))
    optimizer = torch.optim.SGD(_trainable(model), lr=LR)
    losses = []
    for x, target in batches:
        optimizer.zero_grad(set_to_none=False)
        loss = nn.functional.mse_loss(graphed(x), target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return torch.tensor(losses)


def _reduce_overhead_losses(model, batches):
    optimizer = torch.optim.SGD(_trainable(model), lr=LR)

    @torch.compile(mode="reduce-overhead", fullgraph=True)
    def forward_loss(x, target):
        return nn.functional.mse_loss(model(x), target)

    losses = []
    for x, target in batches:
        optimizer.zero_grad(set_to_none=False)
        torch.compiler.cudagraph_mark_step_begin()
        loss = forward_loss(x, target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return torch.tensor(losses)


def _whole_step_graph_losses(model, batches):
    """torch's documented whole-network capture: static input and target, warm-up on a side
    stream, then forward, backward and the optimizer step captured in one graph and replayed."""
    optimizer = torch.optim.SGD(_trainable(model), lr=LR)
    static_x, static_target = batches[0][0].clone(), batches[0][1].clone()
    _zero_initialised_grads(model)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    snapshot = copy.deepcopy(model.state_dict())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm-up (plans, pools), then undone below
            optimizer.zero_grad(set_to_none=False)
            nn.functional.mse_loss(model(static_x), static_target).backward()
    torch.cuda.current_stream().wait_stream(side)
    model.load_state_dict(snapshot)  # the warm-up only computed gradients; parameters unchanged
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=False)
    with torch.cuda.graph(graph):
        static_loss = nn.functional.mse_loss(model(static_x), static_target)
        static_loss.backward()
        optimizer.step()
    # Capturing ran nothing: the first replay is step 1. Gradients accumulate in the captured
    # backward, so they are zeroed (in place, on the replay's stream) before each replay.
    losses = []
    for x, target in batches:
        static_x.copy_(x)
        static_target.copy_(target)
        optimizer.zero_grad(set_to_none=False)
        graph.replay()
        losses.append(static_loss.item())
    return torch.tensor(losses)


PROCEDURES = {"make_graphed_callables": _graphed_callables_losses, "reduce-overhead": _reduce_overhead_losses,
              "whole step in one torch.cuda.graph": _whole_step_graph_losses}


@pytest.mark.parametrize("procedure", list(PROCEDURES))
@pytest.mark.parametrize("kind", ["sklinear", "lowrank"])
def test_graphed_training_steps_equal_eager_and_the_dense_twin(kind, procedure):
    batches = _batches()
    ours, twin = _models(kind)
    expected = _eager_losses(copy.deepcopy(ours), batches)
    twin_eager = _eager_losses(copy.deepcopy(twin), batches)
    torch.testing.assert_close(twin_eager, expected, rtol=1e-4, atol=1e-6)  # the twin is a twin
    got = PROCEDURES[procedure](copy.deepcopy(ours), batches)
    twin_got = PROCEDURES[procedure](copy.deepcopy(twin), batches)
    torch.testing.assert_close(twin_got, twin_eager, rtol=1e-4, atol=1e-6)  # the procedure is exact
    torch.testing.assert_close(got, twin_got, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kind", ["sklinear", "lowrank"])
def test_reduce_overhead_inference_equals_eager(kind):
    ours, _ = _models(kind)
    ours.eval()
    compiled = torch.compile(ours, mode="reduce-overhead", fullgraph=True)
    for x, _ in _batches(4):
        with torch.no_grad():
            torch.compiler.cudagraph_mark_step_begin()
            got = compiled(x).clone()
            expected = ours(x)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_a_captured_forward_and_backward_replays_after_parameter_updates():
    """The eager path's outputs and intermediates come from torch's allocator (the capture's
    private pool): a captured forward + backward of SKLinear replays on new inputs and after
    in-place parameter updates with the eager results, bit for bit."""
    layer = _models("sklinear")[0][0]
    x = torch.randn(48, 64, device="cuda", requires_grad=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            layer(x).sum().backward()
    torch.cuda.current_stream().wait_stream(side)
    x.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = layer(x)
        (dx,) = torch.autograd.grad(y.sum(), x)
    for _ in range(3):
        with torch.no_grad():
            x.copy_(torch.randn_like(x))
            for p in _trainable(layer):
                p.add_(torch.randn_like(p), alpha=1e-2)  # an optimizer step, in place
        graph.replay()
        torch.cuda.synchronize()
        y_eager = layer(x)
        (dx_eager,) = torch.autograd.grad(y_eager.sum(), x)
        torch.testing.assert_close(y, y_eager, rtol=0, atol=0)
        torch.testing.assert_close(dx, dx_eager, rtol=0, atol=0)
