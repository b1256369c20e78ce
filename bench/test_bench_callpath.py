"""Host time of tiny sketched calls on the CPU (issue 25): a layer too small for its arithmetic
to matter, so the ratio is the cost of the path from the framework call to the GEMMs.

- A 64 → 64 layer, batch 8, forward + backward, against the hand-written pair a user would
  write instead, ``nn.Linear(64, 8, bias=False)`` → ``nn.Linear(8, 64)``: ``SKLinear(64, 64,
  num_terms=1, low_rank=4)`` within 1.3×, ``LowRankLinear(64, 64, rank=8)`` within 1.15×; their
  forwards under ``torch.no_grad()`` within 1.2×.
- The bare ``sketchcore.sketched_matmul(x, S, U)`` on tiny arrays within 1.5× of the framework's
  own two products: ``torch.mm`` twice, NumPy's ``(x @ S) @ U``.
- The first call of each layer in a fresh process at most 0.2 s more than its second.

One thread for torch and for sketchcore. Ratios are baseline time / sketchcore time (so a
"within 1.3×" target is a ratio ≥ 1/1.3), measured in alternating blocks (bench/conftest.py).
Run: python -m pytest bench/test_bench_callpath.py --benchmark-only
The breakdown behind these numbers: python bench/callpath_profile.py
"""
import warnings

import numpy as np
import pytest

import sketchcore

torch = pytest.importorskip("torch")
from sketchcore.torch import LowRankLinear, SKLinear  # noqa: E402

GROUP = "tiny call path, 1 thread"


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    torch_threads, own_threads = torch.get_num_threads(), sketchcore.get_num_threads()
    torch.set_num_threads(1)
    sketchcore.set_num_threads(1)
    yield
    torch.set_num_threads(torch_threads)
    sketchcore.set_num_threads(own_threads)


@pytest.fixture(scope="module")
def layers():
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Panther's parameter-count warning at 64 -> 64
        sk = SKLinear(64, 64, num_terms=1, low_rank=4)
    lr = LowRankLinear(64, 64, rank=8)
    pair = torch.nn.Sequential(torch.nn.Linear(64, 8, bias=False), torch.nn.Linear(8, 64))
    x = torch.randn(8, 64, requires_grad=True)
    # The sketched layers compute their own math (float64 check), so the timed code is theirs.
    x64 = x.detach().double()
    with torch.no_grad():
        expected = (x64 @ lr.S.double() @ lr.U.double() + lr.bias.double()).float()
        torch.testing.assert_close(lr(x), expected, rtol=1e-5, atol=1e-5)
        terms = (x64 @ sk.S1s[0].double() @ sk.U1s[0].double() + x64 @ sk.U2s[0].double() @ sk.S2s[0].double()) / 2
        torch.testing.assert_close(sk(x), (terms + sk.bias.double()).float(), rtol=1e-5, atol=1e-5)
    return {"SKLinear": sk, "LowRankLinear": lr, "pair": pair}, x


def _step(module, x):
    return lambda: module(x).sum().backward()


def _no_grad(module, x):
    def run():
        with torch.no_grad():
            module(x)
    return run


@pytest.mark.parametrize("name,bound", [("SKLinear", 1.3), ("LowRankLinear", 1.15)])
def test_tiny_layer_forward_backward(benchmark, paired, layers, name, bound):
    modules, x = layers
    paired(GROUP, f"{name} fwd+bwd", "Linear(64,8)->Linear(8,64)", _step(modules[name], x), _step(modules["pair"], x),
           target=1 / bound)


@pytest.mark.parametrize("name", ["SKLinear", "LowRankLinear"])
def test_tiny_layer_forward_without_grad(benchmark, paired, layers, name):
    modules, x = layers
    paired(GROUP, f"{name} no_grad fwd", "Linear(64,8)->Linear(8,64)", _no_grad(modules[name], x),
           _no_grad(modules["pair"], x), target=1 / 1.2)


@pytest.mark.parametrize("framework", ["torch", "numpy"])
def test_bare_call_on_tiny_arrays(benchmark, paired, framework):
    gen = np.random.default_rng(0)
    x, S, U = (gen.standard_normal(shape, dtype=np.float32) for shape in ((8, 64), (64, 8), (8, 64)))
    if framework == "torch":
        x, S, U = (torch.from_numpy(a) for a in (x, S, U))
        mm = torch.mm
        baseline, name = (lambda: mm(mm(x, S), U)), "torch.mm(torch.mm(x, S), U)"
    else:
        baseline, name = (lambda: (x @ S) @ U), "(x @ S) @ U"
    ours = lambda: sketchcore.sketched_matmul(x, S, U)  # noqa: E731
    np.testing.assert_allclose(np.asarray(ours()), np.asarray(baseline()), rtol=1e-5, atol=1e-5)
    paired(GROUP, f"sketched_matmul {framework}", name, ours, baseline, target=1 / 1.5)


@pytest.mark.parametrize("name", ["SKLinear", "LowRankLinear", "SKConv2d", "RandMultiHeadAttention"])
def test_first_call_costs_little_more_than_the_second(benchmark, name):
    """The first forward + backward of a layer in a fresh process (no import of torch._dynamo,
    SciPy or the like on the way): measured in a subprocess, the excess over the second call."""
    from callpath_profile import first_call  # the same fresh-process script as the profile

    def fresh():
        first, second, _ = first_call(name)
        return first - second
    from conftest import BOUNDS  # bench/conftest.py (imported here, as the other suites do)
    excess = benchmark.pedantic(fresh, rounds=1, iterations=1)
    BOUNDS[f"first call − second call, {name} (fresh process)"] = (excess, 0.2, "s", "≤")
    assert excess <= 0.2, f"{name}: the first call took {excess:.3f} s more than the second"
