"""Whole training steps of models with SKLinear and LowRankLinear in CUDA graphs (issue 25, item
4): captured with ``torch.cuda.make_graphed_callables`` and compiled with
``torch.compile(mode="reduce-overhead")`` (inductor's CUDA graphs), they give the eager step's
losses and gradients, step after step.

Every test here needs a CUDA device and is skipped without one.
"""
import copy
import warnings

import pytest

import sketchcore

torch = pytest.importorskip("torch")
sct = pytest.importorskip("sketchcore.torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not sketchcore.build_info()["cuda"] or sketchcore.cuda_device_count() == 0
                       or not torch.cuda.is_available(), reason="needs the CUDA backend and a CUDA device"),
]


def _model(kind):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = sct.SKLinear(64, 96, 2, 8, activation="gelu") if kind == "sklinear" else sct.LowRankLinear(
            64, 96, 16, activation="relu")
        second = sct.LowRankLinear(96, 32, 8) if kind == "sklinear" else sct.SKLinear(96, 32, 1, 8)
    return torch.nn.Sequential(first, second).cuda()


def _batches(steps):
    gen = torch.Generator(device="cuda").manual_seed(1)
    return [(torch.randn(48, 64, device="cuda", generator=gen), torch.randn(48, 32, device="cuda", generator=gen))
            for _ in range(steps)]


def _eager_run(model, batches):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for x, target in batches:
        optimizer.zero_grad(set_to_none=False)
        loss = torch.nn.functional.mse_loss(model(x), target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("kind", ["sklinear", "lowrank"])
def test_graphed_callables_training_steps_give_the_eager_losses(kind):
    eager_model = _model(kind)
    graphed_model = copy.deepcopy(eager_model)
    batches = _batches(6)
    expected = _eager_run(eager_model, batches)
    static_x = batches[0][0].clone().requires_grad_(False)
    graphed = torch.cuda.make_graphed_callables(graphed_model, (static_x,))
    optimizer = torch.optim.SGD(graphed_model.parameters(), lr=0.05)
    losses = []
    for x, target in batches:
        optimizer.zero_grad(set_to_none=False)
        loss = torch.nn.functional.mse_loss(graphed(x), target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(expected), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kind", ["sklinear", "lowrank"])
def test_reduce_overhead_compiled_training_steps_give_the_eager_losses(kind):
    eager_model = _model(kind)
    compiled_model = copy.deepcopy(eager_model)
    batches = _batches(6)
    expected = _eager_run(eager_model, batches)
    optimizer = torch.optim.SGD(compiled_model.parameters(), lr=0.05)

    @torch.compile(mode="reduce-overhead", fullgraph=True)
    def forward_loss(x, target):
        return torch.nn.functional.mse_loss(compiled_model(x), target)

    losses = []
    for x, target in batches:
        optimizer.zero_grad(set_to_none=False)
        torch.compiler.cudagraph_mark_step_begin()
        loss = forward_loss(x, target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(expected), rtol=1e-4, atol=1e-6)


def test_eager_calls_inside_a_capture_allocate_from_the_graph_pool():
    """The eager path's outputs and intermediates come from torch's allocator (the capture's
    private pool) and the core's temporaries from its stream-ordered pool: a captured
    forward + backward of SKLinear replays on new inputs with the eager results."""
    layer = _model("sklinear")[0]
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
    for _ in range(2):
        with torch.no_grad():
            x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        y_eager = layer(x)
        (dx_eager,) = torch.autograd.grad(y_eager.sum(), x)
        torch.testing.assert_close(y, y_eager, rtol=0, atol=0)
        torch.testing.assert_close(dx, dx_eager, rtol=0, atol=0)
