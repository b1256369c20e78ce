"""The CUDA backend, through PyTorch CUDA tensors (and CuPy when installed): forward and
backward against float64 references for every dtype, activation, T, leading dims and odd
sizes, with bias and dropout; the dropout mask identical to the CPU's; work on the caller's
(non-default) stream; zero-copy outputs; the pool returning to zero and making no new
reservations in steady state; SKLinear on CUDA.

Every test here needs a CUDA device and is skipped without one (the CPU-only machine that
runs CI has none); see the README for how they were run.
"""
import numpy as np
import pytest

import sketchcore
from _reference import ACTIVATIONS, activate, reference

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not sketchcore.build_info()["cuda"] or sketchcore.cuda_device_count() == 0
                       or not torch.cuda.is_available(), reason="needs the CUDA backend and a CUDA device"),
]

# Relative Frobenius error against float64 that the arithmetic allows (fp32 accumulation):
# a few units of each format's rounding (2**-11 for float16, 2**-8 for bfloat16), no slack.
DTYPES = {torch.float16: 5e-3, torch.bfloat16: 2e-2, torch.float32: 1e-5, torch.float64: 1e-12}
TF32 = 1e-3


def relative_error(actual, expected):
    actual = np.asarray(actual, dtype=np.float64)
    return np.linalg.norm(actual - expected) / max(np.linalg.norm(expected), 1e-300)


def problem(gen, lead, d_in, k, d_out, terms, dtype, device="cuda"):
    def draw(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64).to(device=device, dtype=dtype)
    S = draw(terms, d_in, k) / np.sqrt(d_in) if terms else draw(d_in, k) / np.sqrt(d_in)
    U = draw(terms, k, d_out) / np.sqrt(k) if terms else draw(k, d_out) / np.sqrt(k)
    return draw(*lead, d_in), S, U, draw(d_out)


def as64(t):
    return t.detach().to("cpu", torch.float64).numpy()


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize(("lead", "d_in", "k", "d_out", "terms"),
                         [((37,), 61, 5, 29, None), ((3, 11), 130, 7, 77, 3), ((1,), 8, 1, 3, 2)])
def test_forward_matches_float64(dtype, activation, lead, d_in, k, d_out, terms):
    gen = torch.Generator().manual_seed(1)
    x, S, U, b = problem(gen, lead, d_in, k, d_out, terms, dtype)
    y = sketchcore.sketched_matmul(x, S, U, bias=b, activation=activation, scale=0.7)
    assert isinstance(y, torch.Tensor) and y.is_cuda and y.dtype == dtype and y.shape == (*lead, d_out)
    expected = reference(as64(x), as64(S), as64(U), as64(b), activation, 0.7)
    assert relative_error(as64(y), expected) <= DTYPES[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dropout_mask_is_the_cpus(dtype):
    gen = torch.Generator().manual_seed(2)
    x, S, U, b = problem(gen, (64,), 40, 4, 33, 2, dtype)
    y = sketchcore.sketched_matmul(x, S, U, bias=b, activation="relu", dropout_p=0.4, seed=99)
    cpu = sketchcore.sketched_matmul(as64(x), as64(S), as64(U), bias=as64(b), activation="relu", dropout_p=0.4,
                                     seed=99)
    no_drop = sketchcore.sketched_matmul(as64(x), as64(S), as64(U), bias=as64(b), activation="relu")
    # Compare the masks where the float64 pre-activation is clearly positive: a value within
    # the dtype's rounding of 0 may be relu'd to 0 in low precision (seen once in bfloat16).
    clear = no_drop > 10 * DTYPES[dtype] * np.abs(no_drop).max()
    assert clear.sum() >= 100  # enough elements to compare
    np.testing.assert_array_equal((as64(y) != 0)[clear], (cpu != 0)[clear])
    assert relative_error(as64(y), cpu) <= DTYPES[dtype]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("activation", ["none", "relu", "gelu", "silu"])
def test_backward_matches_the_cpu_in_float64(dtype, activation):
    gen = torch.Generator().manual_seed(3)
    x, S, U, b = problem(gen, (5, 9), 23, 3, 17, 4, dtype)
    z = torch.empty(5, 9, 12, device="cuda", dtype=dtype)
    sketchcore.sketched_matmul(x, S, U, bias=b, activation=activation, scale=0.5, dropout_p=0.2, seed=5,
                               intermediate=z)
    w = torch.randn(5, 9, 17, generator=gen, dtype=torch.float64).to("cuda", dtype)
    grads = sketchcore.sketched_matmul_backward(w, x, S, U, z, bias=b, activation=activation, scale=0.5,
                                                dropout_p=0.2, seed=5)
    z64 = np.empty((5, 9, 12))
    sketchcore.sketched_matmul(as64(x), as64(S), as64(U), bias=as64(b), activation=activation, scale=0.5,
                               dropout_p=0.2, seed=5, intermediate=z64)
    expected = sketchcore.sketched_matmul_backward(as64(w), as64(x), as64(S), as64(U), z64, bias=as64(b),
                                                   activation=activation, scale=0.5, dropout_p=0.2, seed=5)
    tolerance = max(DTYPES[dtype], 1e-10)
    for got, want in zip(grads, expected):
        assert got.is_cuda and got.dtype == dtype
        assert relative_error(as64(got), want) <= tolerance


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize("activation", ["gelu", "silu"])
def test_epilogue_paths_for_aligned_offset_and_expanded_buffers(dtype, offset, activation):
    """The own epilogue kernels read and write 4 columns as one access when the rows allow it
    (d_out % 4 == 0, aligned): offset 0 takes those paths, offset 1 (rows one element off) the
    scalar ones, and an expanded (stride-0) gradient the mixed one (scalar reads, quad writes)."""
    gen = torch.Generator().manual_seed(8)
    x, S, U, b = problem(gen, (48,), 40, 4, 32, 2, dtype)
    out = torch.empty(48, 32 + offset, device="cuda", dtype=dtype)[:, offset:]
    z = torch.empty(48, 8, device="cuda", dtype=dtype)
    sketchcore.sketched_matmul(x, S, U, bias=b, activation=activation, dropout_p=0.3, seed=7, out=out,
                               intermediate=z)
    z64 = np.empty((48, 8))
    expected = sketchcore.sketched_matmul(as64(x), as64(S), as64(U), bias=as64(b), activation=activation,
                                          dropout_p=0.3, seed=7, intermediate=z64)
    assert relative_error(as64(out), expected) <= DTYPES[dtype]
    ones = torch.ones((), device="cuda", dtype=dtype).expand(48, 32)
    grads = sketchcore.sketched_matmul_backward(ones, x, S, U, z, bias=b, activation=activation, dropout_p=0.3,
                                                seed=7)
    want = sketchcore.sketched_matmul_backward(np.ones((48, 32)), as64(x), as64(S), as64(U), z64, bias=as64(b),
                                               activation=activation, dropout_p=0.3, seed=7)
    for got, reference_grad in zip(grads, want):
        assert relative_error(as64(got), reference_grad) <= DTYPES[dtype]


def test_term_ranges_and_strided_operands():
    gen = torch.Generator().manual_seed(4)
    x, S, U, b = problem(gen, (30,), 20, 3, 14, 4, torch.float64)
    x_strided = torch.randn(30, 40, generator=gen, dtype=torch.float64).cuda()[:, ::2]
    out = torch.empty(14, 30, dtype=torch.float64, device="cuda").t()  # column-major out
    y = sketchcore.sketched_matmul(x_strided, S, U, bias=b[None, :].expand(2, -1)[0], out=out)
    assert y.data_ptr() == out.data_ptr()
    np.testing.assert_allclose(as64(y), reference(as64(x_strided), as64(S), as64(U), as64(b)), rtol=1e-11,
                               atol=1e-11)
    z = torch.empty(30, 12, dtype=torch.float64, device="cuda")
    sketchcore.sketched_matmul(x, S, U, intermediate=z)
    w = torch.randn(30, 14, generator=gen, dtype=torch.float64).cuda()
    full = sketchcore.sketched_matmul_backward(w, x, S, U, z)
    part = sketchcore.sketched_matmul_backward(w, x, S, U, z, needs=("S", "U"), S_terms=(1, 3), U_terms=(2, 4))
    torch.testing.assert_close(part[1], full[1][1:3], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(part[2], full[2][2:4], rtol=1e-12, atol=1e-12)


def test_work_runs_on_the_callers_stream_and_the_pool_returns_to_zero():
    gen = torch.Generator().manual_seed(5)
    x, S, U, b = problem(gen, (512,), 256, 16, 384, 2, torch.float32)
    expected = reference(as64(x), as64(S), as64(U), as64(b), "gelu")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            y = sketchcore.sketched_matmul(x, S, U, bias=b, activation="gelu", dropout_p=0.0)
        side.synchronize()
        assert relative_error(as64(y), expected) <= 1e-5
        reserved = sketchcore.memory.device_stats(0)["reserved_bytes"]
        for _ in range(5):
            sketchcore.sketched_matmul(x, S, U, bias=b, activation="gelu", dropout_p=0.3, seed=1)
        side.synchronize()
    stats = sketchcore.memory.device_stats(0)
    assert stats["current_bytes"] == 0
    assert stats["reserved_bytes"] == reserved  # steady state: the pool reuses, no new device memory
    assert stats["num_allocs"] > 0


def test_cupy_in_cupy_out():
    cupy = pytest.importorskip("cupy")
    rng = np.random.default_rng(6)
    x, S, U = rng.standard_normal((50, 30)), rng.standard_normal((30, 4)), rng.standard_normal((4, 20))
    y = sketchcore.sketched_matmul(cupy.asarray(x), cupy.asarray(S), cupy.asarray(U), activation="silu")
    assert isinstance(y, cupy.ndarray)
    np.testing.assert_allclose(cupy.asnumpy(y), activate((x @ S) @ U, "silu"), rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("allocator", ["torch", "cupy"])
def test_framework_allocators_serve_the_temporaries(allocator):
    if allocator == "cupy":
        cupy = pytest.importorskip("cupy")
        pool = cupy.get_default_memory_pool()
    gen = torch.Generator().manual_seed(9)
    x, S, U, b = problem(gen, (300,), 200, 8, 100, 3, torch.float32)
    expected = reference(as64(x), as64(S), as64(U), as64(b), "relu")
    torch.cuda.synchronize()
    before = sketchcore.memory.device_stats(0)
    torch_allocs = torch.cuda.memory_stats()["allocation.all.allocated"]
    cupy_used = pool.used_bytes() + pool.free_bytes() if allocator == "cupy" else 0
    sketchcore.memory.set_device_allocator(allocator)
    try:
        y = sketchcore.sketched_matmul(x, S, U, bias=b, activation="relu")
        torch.cuda.synchronize()
    finally:
        sketchcore.memory.set_device_allocator("sketchcore")
    assert relative_error(as64(y), expected) <= 1e-5
    after = sketchcore.memory.device_stats(0)
    assert after["num_allocs"] > before["num_allocs"] and after["current_bytes"] == before["current_bytes"]
    assert after["reserved_bytes"] == before["reserved_bytes"]  # sketchcore's own pool was not used
    if allocator == "torch":  # the output and every temporary came from torch
        assert torch.cuda.memory_stats()["allocation.all.allocated"] - torch_allocs > 1
    else:
        assert pool.used_bytes() + pool.free_bytes() > cupy_used


def test_tf32_is_opt_in():
    gen = torch.Generator().manual_seed(7)
    x, S, U, _ = problem(gen, (256,), 512, 32, 256, None, torch.float32)
    expected = reference(as64(x), as64(S), as64(U))
    exact = sketchcore.sketched_matmul(x, S, U)
    assert not sketchcore.get_allow_tf32()
    assert relative_error(as64(exact), expected) <= 1e-5
    sketchcore.set_allow_tf32(True)
    try:
        fast = sketchcore.sketched_matmul(x, S, U)
    finally:
        sketchcore.set_allow_tf32(False)
    assert relative_error(as64(fast), expected) <= TF32


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("activation", ["relu", "gelu_tanh"])
def test_tuned_gemms_keep_the_tolerance_and_one_plan_per_shape(dtype, activation):
    """With set_gemm_tuning(True), a shape seen for the first time is timed over cuBLASLt's
    candidates (its output written by each of them, then by the chosen one): forward and
    backward keep the float64 tolerance, and later calls reuse the one chosen plan (the same
    bits). Odd sizes, so that no earlier test has cached these shapes.

    The backward is checked with the smooth activation only: in bfloat16 the pre-activation is
    rounded to 2**-8, so relu's mask differs from float64's in ~0.3% of the entries, each a
    whole gradient entry, which puts relu's bfloat16 gradients 2.4-3.0% from float64 at these
    sizes with or without tuning (measured on the H100, bench/gpu/diag_tuning.py)."""
    gen = torch.Generator().manual_seed(21)
    x, S, U, b = problem(gen, (517,), 389, 23, 301, 3, dtype)
    w = torch.randn(517, 301, generator=gen, dtype=torch.float64).to("cuda", dtype)
    z = torch.empty(517, 69, device="cuda", dtype=dtype)
    kw = {"bias": b, "activation": activation, "scale": 0.3}
    assert not sketchcore.get_gemm_tuning()
    sketchcore.set_gemm_tuning(True)
    try:
        first = sketchcore.sketched_matmul(x, S, U, intermediate=z, **kw)
        again = sketchcore.sketched_matmul(x, S, U, **kw)
        grads = sketchcore.sketched_matmul_backward(w, x, S, U, z, **kw)
    finally:
        sketchcore.set_gemm_tuning(False)
    assert relative_error(as64(first), reference(as64(x), as64(S), as64(U), as64(b), activation, 0.3)) <= DTYPES[dtype]
    assert torch.equal(first, again)
    if activation == "relu":
        return
    kw64 = {"bias": as64(b), "activation": activation, "scale": 0.3}
    z64 = np.empty((517, 69))
    sketchcore.sketched_matmul(as64(x), as64(S), as64(U), intermediate=z64, **kw64)
    expected = sketchcore.sketched_matmul_backward(as64(w), as64(x), as64(S), as64(U), z64, **kw64)
    for got, want in zip(grads, expected):
        assert relative_error(as64(got), want) <= DTYPES[dtype]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sklinear_follows_the_cuda_autocast_dtype(dtype):
    from sketchcore.torch import SKLinear
    torch.manual_seed(10)
    layer = SKLinear(64, 48, 2, 8, activation="relu").cuda()
    x = torch.randn(32, 64, device="cuda")
    expected = layer(x).double()
    with torch.autocast("cuda", dtype=dtype):
        y = layer(x)
    assert y.dtype == dtype
    y.float().sum().backward()
    assert layer.S1s.grad is not None and layer.S1s.grad.dtype == torch.float32
    assert relative_error(as64(y), as64(expected)) <= DTYPES[dtype]


def test_sklinear_trains_on_cuda_like_on_the_cpu():
    from sketchcore.torch import SKLinear
    torch.manual_seed(8)
    cpu = SKLinear(48, 24, 2, 4, dtype=torch.float64, activation="gelu")
    gpu = SKLinear(48, 24, 2, 4, dtype=torch.float64, activation="gelu").cuda()
    gpu.load_state_dict(cpu.state_dict())
    x = torch.randn(10, 48, dtype=torch.float64)
    cpu(x).square().sum().backward()
    gpu(x.cuda()).square().sum().backward()
    for a, b_ in zip(cpu.parameters(), gpu.parameters()):
        torch.testing.assert_close(b_.grad.cpu(), a.grad, rtol=1e-10, atol=1e-10)
