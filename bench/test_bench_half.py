"""16-bit (float16, bfloat16) calls against the float32 call on the same data, CPU.

Run: pytest bench/test_bench_half.py --benchmark-only
Issue 26's targets: a 16-bit ``sketched_matmul`` takes ≤ 1.25× the float32 call (ratio
float32 time / 16-bit time ≥ 0.8) at 2048 × 1024 → 1024 (T·k 128) and 4096 × 4096 → 4096
(T·k 256), and an ``SKLinear`` training step under ``torch.autocast("cpu", torch.bfloat16)``
is no slower than in float32 (ratio ≥ 1.0). The CPU computes 16-bit problems in float32
(operands widened by vectorised conversions, results rounded once), except that where it has
AVX512_BF16 the products of two bfloat16 operands run in sketchcore's native bfloat16 GEMM
(``build_info()["cpu_bf16_gemm"]``; compare with ``SKETCHCORE_BF16_GEMM=0``).
"""
import numpy as np
import pytest

import sketchcore

torch = pytest.importorskip("torch")
from sketchcore.torch import SKLinear  # noqa: E402

# (rows, d_in, d_out, T·k)
SHAPES = [(2048, 1024, 1024, 128), (4096, 4096, 4096, 256)]
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def name(shape):
    return f"16-bit {shape[0]}x{shape[1]}->{shape[2]} Tk{shape[3]}"


@pytest.fixture(scope="module", params=SHAPES, ids=name)
def problem(request):
    rows, d_in, d_out, r = request.param
    rng = np.random.default_rng(26)
    x = torch.from_numpy(rng.standard_normal((rows, d_in), dtype=np.float32))
    S = torch.from_numpy(rng.standard_normal((d_in, r), dtype=np.float32) / np.float32(np.sqrt(d_in)))
    U = torch.from_numpy(rng.standard_normal((r, d_out), dtype=np.float32) / np.float32(np.sqrt(r)))
    return request.param, x, S, U


@pytest.mark.parametrize("dtype", DTYPES)
def test_half_vs_float32(problem, paired, dtype):
    """Target: the 16-bit call ≤ 1.25× the float32 call (ratio ≥ 0.8)."""
    shape, x, S, U = problem
    half = [t.to(DTYPES[dtype]) for t in (x, S, U)]
    y32 = sketchcore.sketched_matmul(x, S, U)
    y16 = sketchcore.sketched_matmul(*half)
    ref = sketchcore.sketched_matmul(*[t.double() for t in half])
    assert y16.dtype == DTYPES[dtype]
    assert torch.linalg.norm(y16.double() - ref) / torch.linalg.norm(ref) < 1e-2
    pairs = 5 if shape[0] > 2048 else 9
    paired(name(shape), f"sketched_matmul {dtype}", "float32 call", lambda: sketchcore.sketched_matmul(*half),
           lambda: sketchcore.sketched_matmul(x, S, U), pairs=pairs, calls=2, target=0.8)
    del y32


def test_bf16_backward_vs_float32(problem, paired):
    """The bfloat16 backward (dS, dU, dbias; no activation: the native GEMM's case) against the
    float32 backward on the same data; reported with the forward's target (≥ 0.8)."""
    shape, x, S, U = problem
    rows, _, d_out, _ = shape
    g = torch.randn(rows, d_out, generator=torch.Generator().manual_seed(3))
    bias = torch.zeros(d_out)
    z32 = torch.empty(rows, S.shape[1])
    sketchcore.sketched_matmul(x, S, U, bias=bias, intermediate=z32)
    half = [t.bfloat16() for t in (g, x, S, U, z32, bias)]
    needs = ("S", "U", "bias")
    pairs = 5 if rows > 2048 else 9
    paired(name(shape), "backward bfloat16", "float32 backward",
           lambda: sketchcore.sketched_matmul_backward(*half[:5], bias=half[5], needs=needs),
           lambda: sketchcore.sketched_matmul_backward(g, x, S, U, z32, bias=bias, needs=needs),
           pairs=pairs, calls=2, target=0.8)


def test_sklinear_training_under_bf16_autocast(paired):
    """Target ≥ 1.0×: an SKLinear forward + backward under CPU bf16 autocast vs float32."""
    torch.manual_seed(0)
    layer = SKLinear(1024, 1024, num_terms=2, low_rank=32)
    x = torch.randn(2048, 1024)

    def step_f32():
        layer.zero_grad(set_to_none=True)
        layer(x).square().mean().backward()

    def step_bf16():
        layer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", torch.bfloat16):
            y = layer(x)
        y.float().square().mean().backward()

    paired("SKLinear 2048x1024->1024 T2 k32 training", "bf16 autocast step", "float32 step", step_bf16, step_f32,
           pairs=15, calls=9, target=1.0)
