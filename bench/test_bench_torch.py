"""SKLinear against nn.Linear and Panther's CPU algorithm (forward and forward+backward),
float32, and peak memory of one training step.

Run: pytest bench --benchmark-only -k torch
Panther's algorithm is reproduced from its pawX linear.cpp: per-term bmm on the input
expanded over the terms, then the means; its backward as written there (8 bmm per term).
"""
import json
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
from sketchcore.torch import SKLinear  # noqa: E402

# (batch, in, out, num_terms, low_rank)
SHAPES = [
    (4096, 4096, 4096, 1, 128),
    (4096, 4096, 4096, 2, 64),
    (1024, 2048, 2048, 4, 32),
    (256, 1024, 1024, 8, 16),
]


class PantherLinear(torch.autograd.Function):
    """Panther's CPU forward and backward, operation for operation."""

    @staticmethod
    def forward(ctx, x, S1s, S2s, U1s, U2s, bias):
        ctx.save_for_backward(x, S1s, S2s, U1s, U2s)
        T = S2s.shape[0]
        expanded = x.unsqueeze(0).expand(T, x.shape[0], x.shape[1])
        term1 = expanded.bmm(S1s).bmm(U1s)
        term2 = expanded.bmm(U2s).bmm(S2s)
        return (term1.mean(0) + term2.mean(0)) * 0.5 + bias

    @staticmethod
    def backward(ctx, grad_output):
        x, S1s, S2s, U1s, U2s = ctx.saved_tensors
        T = S2s.shape[0]
        g = (grad_output / (2 * T)).unsqueeze(0).expand(T, grad_output.shape[0], grad_output.shape[1])
        x_t = x.unsqueeze(0).expand(T, x.shape[0], x.shape[1]).transpose(1, 2)
        U1s_t, S1s_t, U2s_t, S2s_t = (a.transpose(1, 2) for a in (U1s, S1s, U2s, S2s))
        t1 = g.bmm(U1s_t)
        grad_input = t1.bmm(S1s_t).sum(0) + g.bmm(S2s_t).bmm(U2s_t).sum(0)
        grad_S2s = U2s_t.bmm(x_t).bmm(g)
        grad_S1s = x_t.bmm(g.bmm(U1s_t))
        return grad_input, grad_S1s, grad_S2s, None, None, grad_output.sum(0)


def group_name(shape):
    b, di, do, t, k = shape
    return f"SKLinear {b}x{di}->{do} T{t}xk{k}"


@pytest.fixture(scope="module", params=SHAPES, ids=group_name)
def layers(request):
    b, di, do, t, k = request.param
    torch.manual_seed(0)
    ours = SKLinear(di, do, t, k)
    dense = torch.nn.Linear(di, do)
    x = torch.randn(b, di, requires_grad=True)
    panther_params = [p.detach().clone().requires_grad_(p.requires_grad) for p in (ours.S1s, ours.S2s)]
    U1s, U2s, bias = ours.U1s, ours.U2s, ours.bias.detach().clone().requires_grad_()

    def panther(inp):
        return PantherLinear.apply(inp, panther_params[0], panther_params[1], U1s, U2s, bias)

    with torch.no_grad():
        y_ours, y_panther = ours(x), panther(x)
        err = (torch.linalg.norm(y_ours - y_panther) / torch.linalg.norm(y_panther)).item()
    assert err < 1e-5, f"SKLinear and Panther's algorithm disagree: {err:.2e}"
    return request.param, x, ours, dense, panther


def train_step(module, x):
    module(x).sum().backward()


def test_forward_vs_panther(layers, paired):
    shape, x, ours, dense, panther = layers
    with torch.no_grad():
        paired(group_name(shape), "SKLinear forward", "Panther algorithm forward", lambda: ours(x), lambda: panther(x),
               pairs=5, calls=2)


def test_forward_vs_dense(layers, paired):
    shape, x, ours, dense, panther = layers
    with torch.no_grad():
        paired(group_name(shape), "SKLinear forward", "nn.Linear forward", lambda: ours(x), lambda: dense(x),
               pairs=5, calls=2)


def test_forward_backward_vs_panther(layers, paired):
    """Target: ≥ 3× faster than Panther's algorithm (forward+backward) at the first three shapes."""
    shape, x, ours, dense, panther = layers
    paired(group_name(shape), "SKLinear fwd+bwd", "Panther algorithm fwd+bwd", lambda: train_step(ours, x),
           lambda: train_step(panther, x), pairs=5, calls=2, target=3.0 if shape in SHAPES[:3] else None)


def test_forward_backward_vs_dense(layers, paired):
    shape, x, ours, dense, panther = layers
    paired(group_name(shape), "SKLinear fwd+bwd", "nn.Linear fwd+bwd", lambda: train_step(ours, x),
           lambda: train_step(dense, x), pairs=5, calls=2)


_PEAK_SCRIPT = textwrap.dedent("""
    import json, sys
    import torch
    sys.path.insert(0, {bench!r})
    from test_bench_torch import PantherLinear
    from sketchcore.torch import SKLinear

    def make_step(b, di, do, t, k):
        torch.manual_seed(0)
        layer = SKLinear(di, do, t, k)
        x = torch.randn(b, di, requires_grad=True)
        args = [p.detach().clone().requires_grad_() for p in (layer.S1s, layer.S2s)]
        bias = layer.bias.detach().clone().requires_grad_()
        if {which!r} == "sketchcore":
            return lambda: layer(x).sum().backward()
        return lambda: PantherLinear.apply(x, args[0], args[1], layer.U1s, layer.U2s, bias).sum().backward()

    def status_mib(field):
        for line in open("/proc/self/status"):
            if line.startswith(field):
                return int(line.split()[1]) / 1024

    # A small step first loads each library's code and starts its threads, which a
    # training loop pays once; then the peak is reset (clear_refs 5) and one step measured.
    make_step(64, 256, 256, 1, 16)()
    step = make_step(*{shape!r})
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base = status_mib("VmRSS")
    step()
    print(json.dumps({{"extra_mib": status_mib("VmHWM") - base}}))
""")


def _extra_peak_mib(shape, which):
    import pathlib
    script = _PEAK_SCRIPT.format(bench=str(pathlib.Path(__file__).parent), shape=shape, which=which)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])["extra_mib"]


def test_peak_memory_vs_panther(benchmark):
    """Target: the extra peak resident memory of one training step (beyond inputs and
    parameters, each side in a fresh process after a small warm-up step) is ≤ 1/4 of
    Panther's algorithm's, at the first shape. Linux only (/proc/self/status)."""
    from conftest import BOUNDS
    shape = SHAPES[0]
    ours = benchmark.pedantic(lambda: _extra_peak_mib(shape, "sketchcore"), rounds=1, iterations=1)
    theirs = _extra_peak_mib(shape, "panther")
    benchmark.extra_info.update({"sketchcore_extra_peak_mib": ours, "panther_extra_peak_mib": theirs})
    BOUNDS[f"{group_name(shape)}: extra peak memory, SKLinear / Panther"] = (ours / theirs, 0.25, "×", "≤")
    BOUNDS[f"{group_name(shape)}: extra peak memory of SKLinear (MiB)"] = (ours, float("inf"), "MiB", "≤")
    BOUNDS[f"{group_name(shape)}: extra peak memory of Panther's algorithm (MiB)"] = (theirs, float("inf"), "MiB", "≤")
