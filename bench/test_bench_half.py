"""16-bit (float16, bfloat16) calls against the float32 call on the same data, CPU.

Run: pytest bench/test_bench_half.py --benchmark-only
Issue 26's targets: a 16-bit ``sketched_matmul`` takes ≤ 1.25× the float32 call (ratio
float32 time / 16-bit time ≥ 0.8) at 2048 × 1024 → 1024 (T·k 128) and 4096 × 4096 → 4096
(T·k 256), and an ``SKLinear`` training step under ``torch.autocast("cpu", torch.bfloat16)``
is no slower than in float32 (ratio ≥ 1.0). The CPU computes 16-bit problems in float32
(operands widened by vectorised conversions, results rounded once), except that where it has
AVX512_BF16 the products of two bfloat16 operands run in sketchcore's native bfloat16 GEMM
(``build_info()["cpu_bf16_gemm"]``; compare with ``SKETCHCORE_BF16_GEMM=0``). Without it the
autocast step is also reported against the float32 step with the bf16 step's own round trip
of y (the floor there: no 16-bit arithmetic is faster than float32 on such a CPU).
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


def test_sklinear_training_under_bf16_autocast_against_the_regions_own_casts(paired):
    """Where the CPU has no bfloat16 instructions no 16-bit arithmetic is faster than float32,
    and the bf16 step above also pays for casting y back to float32 (forward and backward):
    the float32 step with the same round trip of y is the floor that no layer can beat there.
    Reported against that floor (no target: informative on CPUs with AVX512_BF16)."""
    torch.manual_seed(0)
    layer = SKLinear(1024, 1024, num_terms=2, low_rank=32)
    x = torch.randn(2048, 1024)

    def step_f32_round_trip():
        layer.zero_grad(set_to_none=True)
        layer(x).to(torch.bfloat16).float().square().mean().backward()

    def step_bf16():
        layer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", torch.bfloat16):
            y = layer(x)
        y.float().square().mean().backward()

    gemm = "native bf16 GEMM" if sketchcore.build_info()["cpu_bf16_gemm"] else "no bf16 GEMM"
    paired(f"SKLinear 2048x1024->1024 T2 k32 training ({gemm})", "bf16 autocast step",
           "float32 step + y's bf16 round trip", step_bf16, step_f32_round_trip, pairs=15, calls=9)


def _mkl_gemm_bf16():
    """MKL's gemm_bf16bf16f32 as torch's x86 wheel exports it (Fortran interface), or None."""
    import ctypes
    import os
    path = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
    try:
        return ctypes.CDLL(path, mode=os.RTLD_NOLOAD).gemm_bf16bf16f32_
    except (OSError, AttributeError):
        return None


@pytest.fixture(scope="module")
def first_product():
    """X·Sp alone (d_out = 1, so the second product is negligible) at 2048 × 1024 by 1024 × 128:
    float32 and bfloat16 operands, and the group name (which says whether the native GEMM runs)."""
    gen = torch.Generator().manual_seed(5)
    x, S = torch.randn(2048, 1024, generator=gen), torch.randn(1024, 128, generator=gen) / 32
    U = torch.randn(128, 1, generator=gen)
    group = f"bf16 X·Sp 2048x1024x128 (cpu_bf16_gemm={sketchcore.build_info()['cpu_bf16_gemm']})"
    return group, (x, S, U), tuple(t.bfloat16() for t in (x, S, U))


# sketchcore's bfloat16 call (the native GEMM where build_info()["cpu_bf16_gemm"]) against its
# float32 call, torch's bf16 matmul (oneDNN, not reachable from C) and MKL's own
# gemm_bf16bf16f32 (which torch's wheel exports). Reported, no targets.
def test_native_bf16_product_vs_float32_call(first_product, paired):
    group, f32, b16 = first_product
    paired(group, "sketched_matmul bf16", "float32 call", lambda: sketchcore.sketched_matmul(*b16),
           lambda: sketchcore.sketched_matmul(*f32), pairs=9)


def test_native_bf16_product_vs_torch_bf16_matmul(first_product, paired):
    group, _, (xb, Sb, Ub) = first_product
    paired(group, "sketched_matmul bf16", "torch bf16 x@S", lambda: sketchcore.sketched_matmul(xb, Sb, Ub),
           lambda: xb @ Sb, pairs=9)


def test_native_bf16_product_vs_mkl_gemm_bf16(first_product, paired):
    import ctypes
    group, _, (xb, Sb, Ub) = first_product
    mkl = _mkl_gemm_bf16()
    if mkl is None:
        pytest.skip("this torch build does not export MKL's gemm_bf16bf16f32")
    out = torch.empty(2048, 128)
    i = ctypes.c_int
    m, n, k = i(128), i(2048), i(1024)  # column-major: outᵀ (128 × 2048) = Sᵀ · xᵀ
    one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)

    def mkl_call():
        mkl(b"N", b"N", ctypes.byref(m), ctypes.byref(n), ctypes.byref(k), ctypes.byref(one),
            ctypes.c_void_p(Sb.data_ptr()), ctypes.byref(m), ctypes.c_void_p(xb.data_ptr()), ctypes.byref(k),
            ctypes.byref(zero), ctypes.c_void_p(out.data_ptr()), ctypes.byref(m))

    mkl_call()
    assert torch.allclose(out, xb.float() @ Sb.float(), rtol=1e-4, atol=1e-3)
    paired(group, "sketched_matmul bf16", "MKL gemm_bf16bf16f32", lambda: sketchcore.sketched_matmul(xb, Sb, Ub),
           mkl_call, pairs=9)


# A bfloat16 bottleneck layer, silu(x @ A) @ B (+ bias), forward alone and forward + backward,
# against torch's composition of the same ops (oneDNN; on AMX-BF16 CPUs its bf16 matmuls use the
# tiles). sketchcore's kernel is build_info()["cpu_bf16_amx"]: run once more with
# SKETCHCORE_BF16_AMX=0 for the VDPBF16PS kernel (read once per process). Reported, no targets.
BOTTLENECKS = [(2048, 384, 96, 1024), (4096, 1024, 256, 1024)]


@pytest.fixture(scope="module", params=BOTTLENECKS, ids=lambda s: f"{s[0]}x{s[1]}->{s[2]}->{s[3]}")
def bottleneck(request):
    rows, d_in, r, d_out = request.param
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(rows, d_in, generator=gen).bfloat16()
    A = (torch.randn(d_in, r, generator=gen) / d_in ** 0.5).bfloat16()
    B = (torch.randn(r, d_out, generator=gen) / r ** 0.5).bfloat16()
    bias = torch.zeros(d_out).bfloat16()
    g = torch.randn(rows, d_out, generator=gen).bfloat16()
    info = sketchcore.build_info()
    kernel = "amx" if info["cpu_bf16_amx"] else "vdpbf16ps" if info["cpu_bf16_gemm"] else "widening"
    group = f"bf16 silu bottleneck {rows}x{d_in}->{r}->{d_out} (kernel={kernel})"
    return group, x, A, B, bias, g


def test_bf16_bottleneck_forward_vs_torch(bottleneck, paired):
    group, x, A, B, _, _ = bottleneck
    y = sketchcore.sketched_matmul(x, A, B, inner_activation="silu")
    want = torch.nn.functional.silu(x.double() @ A.double()) @ B.double()
    assert torch.linalg.norm(y.double() - want) / torch.linalg.norm(want) < 1e-2
    paired(group, "sketched_matmul forward", "torch silu(x@A)@B",
           lambda: sketchcore.sketched_matmul(x, A, B, inner_activation="silu"),
           lambda: torch.nn.functional.silu(x @ A) @ B, pairs=9, calls=3)


def test_bf16_bottleneck_training_step_vs_torch(bottleneck, paired):
    from sketchcore.torch import sketched_linear
    group, x, A, B, bias, g = bottleneck
    leaves = [t.clone().requires_grad_() for t in (x, A, B, bias)]

    def ours():
        sketched_linear(*leaves, inner_activation="silu").backward(g)

    def composed():
        xl, Al, Bl, bl = leaves
        (torch.nn.functional.silu(xl @ Al) @ Bl + bl).backward(g)

    paired(group, "sketched_linear forward + backward", "torch composition forward + backward", ours, composed,
           pairs=7, calls=2)
