"""The gate on CUDA paths that have not yet passed their tests on a GPU (DESIGN.md, "Verified or
gated"): the core's registry read from SKETCHCORE_CUDA_UNVERIFIED (once, in a fresh process) and
overridden by the program, the decisions the CUDA backend and the adapters take from it (the
padded inner width, the Performer path of torch tensors), checked here without a GPU, and what
``python -m sketchcore info`` reports. The GPU side: tests/gpu/test_gpu_padded_rank.py,
test_gpu_performer.py and test_gpu_jax.py run both sides of each gate on a device."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sketchcore

NAMES = ["cuda_padded_inner_width", "cuda_performer_kernels", "jax_cuda_handlers", "cuda_inner_activation",
         "cuda_int8_factors", "cuda_fp8_factors"]
BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}


def in_fresh_process(value, code):
    """Runs `code` in a new interpreter with SKETCHCORE_CUDA_UNVERIFIED=value (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k != "SKETCHCORE_CUDA_UNVERIFIED"}
    if value is not None:
        env["SKETCHCORE_CUDA_UNVERIFIED"] = value
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)


STATES = ("import json, sketchcore\n"
          "try:\n"
          "    print(json.dumps({p.name: p.enabled for p in sketchcore.gated_paths()}))\n"
          "except ValueError as e:\n"
          "    print(json.dumps({'error': str(e)}))\n")


@pytest.mark.parametrize(("value", "enabled"), [
    (None, set()), ("0", set()), ("", set()), ("none", set()), ("1", set(NAMES)), ("all", set(NAMES)),
    ("cuda_performer_kernels", {"cuda_performer_kernels"}),
    (" jax_cuda_handlers , cuda_padded_inner_width", {"jax_cuda_handlers", "cuda_padded_inner_width"}),
])
def test_the_environment_opens_all_some_or_none(value, enabled):
    done = in_fresh_process(value, STATES)
    assert done.returncode == 0, done.stderr
    states = json.loads(done.stdout.strip().splitlines()[-1])
    assert list(states) == NAMES
    assert {name for name, on in states.items() if on} == enabled


def test_a_malformed_variable_is_an_error_naming_it_and_the_names():
    done = in_fresh_process("yes", STATES)
    error = json.loads(done.stdout.strip().splitlines()[-1])["error"]
    assert error == ("SKETCHCORE_CUDA_UNVERIFIED: environment variable: expected 0, 1, all, none or a "
                     "comma-separated list of cuda_padded_inner_width, cuda_performer_kernels, jax_cuda_handlers, "
                     "cuda_inner_activation, cuda_int8_factors, cuda_fp8_factors, got 'yes'")


def test_the_default_is_closed_here():
    """This test session does not set the variable (CI must not): every gate is closed."""
    assert os.environ.get("SKETCHCORE_CUDA_UNVERIFIED") in (None, "", "0")
    paths = sketchcore.gated_paths()
    assert [p.name for p in paths] == NAMES
    assert all(not p.enabled and not p.overridden and p.description for p in paths)


def test_overrides_set_restore_and_nest():
    name = "cuda_performer_kernels"
    sketchcore.set_gated_path(name, True)
    try:
        assert sketchcore.gated_path_enabled(name)
        assert {p.name: p.overridden for p in sketchcore.gated_paths()}[name]
        with sketchcore.gated_path(name, False):
            assert not sketchcore.gated_path_enabled(name)
            with sketchcore.gated_path(name):
                assert sketchcore.gated_path_enabled(name)
            assert not sketchcore.gated_path_enabled(name)
        assert sketchcore.gated_path_enabled(name)  # the outer override is back
        assert not sketchcore.gated_path_enabled("cuda_padded_inner_width")  # others untouched
    finally:
        sketchcore.set_gated_path(name, None)
    assert not sketchcore.gated_path_enabled(name)
    assert not {p.name: p.overridden for p in sketchcore.gated_paths()}[name]


def test_a_context_restores_after_an_exception():
    with pytest.raises(KeyError):
        with sketchcore.gated_path("jax_cuda_handlers"):
            raise KeyError("inside")
    assert not sketchcore.gated_path_enabled("jax_cuda_handlers")


def test_bad_names_and_values_are_refused():
    listed = ("one of cuda_padded_inner_width, cuda_performer_kernels, jax_cuda_handlers, cuda_inner_activation, "
              "cuda_int8_factors, cuda_fp8_factors")
    with pytest.raises(ValueError, match=f"gated path: name: expected {listed}, got 'cuda_everything'"):
        sketchcore.gated_path_enabled("cuda_everything")
    with pytest.raises(ValueError, match="got 'padded'"):
        sketchcore.set_gated_path("padded", True)
    with pytest.raises(TypeError, match="gated path: name: expected a str, got int"):
        sketchcore.gated_path_enabled(1)
    with pytest.raises(TypeError, match="set_gated_path: enabled: expected True, False or None, got int"):
        sketchcore.set_gated_path("jax_cuda_handlers", 1)
    with pytest.raises(TypeError, match="gated_path: enabled: expected a bool, got str"):
        with sketchcore.gated_path("jax_cuda_handlers", "yes"):
            pass
    assert not any(p.overridden for p in sketchcore.gated_paths())


def test_a_closed_path_is_refused_naming_it_and_how_to_open_it():
    from sketchcore import _gates
    with pytest.raises(RuntimeError) as refused:
        _gates.require_gated_path("cuda_performer_kernels", "performer_attention on a CUDA device")
    message = str(refused.value)
    assert message.startswith("performer_attention on a CUDA device: this runs the gated path "
                              "'cuda_performer_kernels' (the fused Performer attention kernels")
    assert "SKETCHCORE_CUDA_UNVERIFIED=1 (or =cuda_performer_kernels)" in message
    with sketchcore.gated_path("cuda_performer_kernels"):
        _gates.require_gated_path("cuda_performer_kernels", "performer_attention on a CUDA device")


def aligned_width(rank, size):
    """The smallest width ≥ rank whose rows are a multiple of 16 bytes (float64: rank)."""
    if size >= 8:
        return rank
    width = rank
    while (width * size) % 16:
        width += 1
    return width


@settings(max_examples=200, deadline=None)
@given(rank=st.integers(0, 5000), dtype=st.sampled_from(sorted(BYTES)), gate=st.booleans())
def test_the_cuda_inner_width_pads_only_through_the_gate(rank, dtype, gate):
    with sketchcore.gated_path("cuda_padded_inner_width", gate):
        width = sketchcore.cuda_inner_width(rank, dtype)
    assert width == (aligned_width(rank, BYTES[dtype]) if gate else rank)


def test_the_cuda_inner_width_takes_framework_dtypes_and_refuses_bad_arguments():
    torch = pytest.importorskip("torch")
    with sketchcore.gated_path("cuda_padded_inner_width"):
        assert sketchcore.cuda_inner_width(375, torch.bfloat16) == 376
        assert sketchcore.cuda_inner_width(5, np.dtype("float32")) == 8
        assert sketchcore.cuda_inner_width(5, torch.float64) == 5
    with pytest.raises(ValueError, match="cuda_inner_width: rank: expected an integer ≥ 0, got -1"):
        sketchcore.cuda_inner_width(-1, "float32")
    with pytest.raises(TypeError, match="cuda_inner_width: rank: expected an int, got bool"):
        sketchcore.cuda_inner_width(True, "float32")
    with pytest.raises(ValueError, match="cuda_inner_width: dtype: expected one of float16, bfloat16, float32, "
                                         "float64, got 'int8'"):
        sketchcore.cuda_inner_width(4, "int8")


def test_info_lists_each_gated_path_and_its_state():
    env = {k: v for k, v in os.environ.items() if k != "SKETCHCORE_CUDA_UNVERIFIED"}
    env["SKETCHCORE_CUDA_UNVERIFIED"] = "cuda_padded_inner_width"
    command = [sys.executable, "-m", "sketchcore", "info"]
    facts = json.loads(subprocess.run([*command, "--json"], capture_output=True, text=True, env=env,
                                      timeout=300).stdout)
    assert facts["gated_paths"] == {"cuda_padded_inner_width": "enabled", "cuda_performer_kernels": "disabled",
                                    "jax_cuda_handlers": "disabled", "cuda_inner_activation": "disabled",
                                    "cuda_int8_factors": "disabled", "cuda_fp8_factors": "disabled"}
    assert facts["environment"]["SKETCHCORE_CUDA_UNVERIFIED"] == "cuda_padded_inner_width"
    env["SKETCHCORE_CUDA_UNVERIFIED"] = "maybe"
    text = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    line = next(line for line in text.stdout.splitlines() if line.startswith("gated_paths"))
    assert text.returncode == 0 and "expected 0, 1, all, none" in line and "got 'maybe'" in line


def test_torch_performer_takes_the_composite_formula_on_a_gated_device(monkeypatch):
    """sketchcore.torch's dispatch: CUDA tensors take the composite formula (operations that
    passed on a GPU) until cuda_performer_kernels is open. The CPU stands in for the gated
    device to run both sides here: the composite side is reference_attention bit for bit,
    gradients included; the open side is the kernels (their (B, L, H, e) output memory)."""
    torch = pytest.importorskip("torch")
    from sketchcore.torch.ops import _performer
    from sketchcore.torch.ops._performer_formulas import reference_attention
    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    assert (_performer.performer_path(cuda), _performer.performer_path(cpu)) == ("composite", "kernels")
    with sketchcore.gated_path("cuda_performer_kernels"):
        assert (_performer.performer_path(cuda), _performer.performer_path(cpu)) == ("kernels", "kernels")
        # causal softmax below float64: the fused CUDA kernels refuse it (fixed key constant), the CPU's do not
        unstable = ("softmax", True, torch.float32)
        assert (_performer.performer_path(cuda, *unstable), _performer.performer_path(cpu, *unstable)) == (
            "composite", "kernels")
        for stable in (("softmax", True, torch.float64), ("relu", True, torch.bfloat16), ("softmax", False, torch.half)):
            assert _performer.performer_path(cuda, *stable) == "kernels"

    monkeypatch.setattr(_performer, "_GATED_DEVICES", ("cpu",))
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, 21, 8, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(3))
    W = torch.randn(16, 8, generator=gen, dtype=torch.float64)
    weights = (torch.rand(2, 21, generator=gen, dtype=torch.float64) > 0.2).double()
    expected = reference_attention(q, k, v, W, "relu", True, weights)
    expected_grads = torch.autograd.grad(expected.square().sum(), (q, k, v))
    out = _performer.performer_attention(q, k, v, W, kernel="relu", causal=True, key_weights=weights)
    assert out.is_contiguous() and torch.equal(out, expected)
    for got, want in zip(torch.autograd.grad(out.square().sum(), (q, k, v)), expected_grads):
        assert torch.equal(got, want)
    with sketchcore.gated_path("cuda_performer_kernels"):
        kernels = _performer.performer_attention(q, k, v, W, kernel="relu", causal=True, key_weights=weights)
    assert kernels.transpose(1, 2).is_contiguous()
    assert (torch.linalg.norm(kernels - expected) / torch.linalg.norm(expected)).item() <= 1e-12


def test_torch_inner_activation_takes_the_composite_formula_on_a_gated_device(monkeypatch):
    """sketchcore.torch's dispatch for the inner activation: CUDA tensors take the composite torch
    formula (matmul, σ, matmul) until cuda_inner_activation is open. The CPU stands in for the gated
    device: closed, LowRankLinear and sketched_linear equal the composite bit for bit, gradients
    included; open, they run the fused kernels (equal within rounding)."""
    torch = pytest.importorskip("torch")
    from sketchcore.torch import LowRankLinear, sketched_linear
    from sketchcore.torch.ops import _functional
    from sketchcore.torch.ops._second_order import composite
    cuda, cpu = torch.empty(0, device="meta"), torch.empty(0)
    monkeypatch.setattr(_functional, "_GATED_DEVICES", ("meta",))
    assert (_functional.takes_composite(cuda, "silu"), _functional.takes_composite(cpu, "silu")) == (True, False)
    assert not _functional.takes_composite(cuda, "none")
    with sketchcore.gated_path("cuda_inner_activation"):
        assert not _functional.takes_composite(cuda, "silu")

    monkeypatch.setattr(_functional, "_GATED_DEVICES", ("cpu",))
    torch.manual_seed(5)
    layer = LowRankLinear(24, 16, 8, activation="gelu", inner_activation="silu").double()
    x = torch.randn(7, 24, dtype=torch.float64, requires_grad=True)
    seed = torch.zeros([], dtype=torch.int64)
    expected = composite(x, layer.S, layer.U, layer.bias, "gelu", 1.0, 0.0, seed, "silu")
    want = torch.autograd.grad(expected.square().sum(), (x, layer.S, layer.U))
    for run in (lambda: layer(x), lambda: sketched_linear(x, layer.S, layer.U, layer.bias, activation="gelu",
                                                          inner_activation="silu")):
        out = run()
        assert torch.equal(out, expected)
        for got, ref in zip(torch.autograd.grad(out.square().sum(), (x, layer.S, layer.U)), want):
            assert torch.equal(got, ref)
        with sketchcore.gated_path("cuda_inner_activation"):
            fused = run()
        assert fused.grad_fn is not None and type(fused.grad_fn) is not type(out.grad_fn)
        assert (torch.linalg.norm(fused - expected) / torch.linalg.norm(expected)).item() <= 1e-12
