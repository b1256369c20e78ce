"""CUDA benchmarks (the CUDA issue's targets), bfloat16, x (8192, 4096) → 4096, T·k = 256.

Run on a machine with a CUDA device: pytest bench/test_bench_gpu.py --benchmark-only
Skipped without one. Each timed call runs ITERATIONS launches and then synchronises, so the
blocks of the paired protocol (bench/conftest.py) time device work, not launch latency.
"""
import pytest

import sketchcore
from gpu_timing import event_median_ms

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.skipif(not sketchcore.build_info()["cuda"] or sketchcore.cuda_device_count() == 0
                                or not torch.cuda.is_available(), reason="needs the CUDA backend and a CUDA device")

ROWS, D_IN, D_OUT, TERMS, RANK = 8192, 4096, 4096, 1, 256
ITERATIONS = 10
GROUP = f"CUDA bf16 {ROWS}x{D_IN}->{D_OUT} T{TERMS}xk{RANK}"


def timed(fn):
    def run():
        for _ in range(ITERATIONS):
            fn()
        torch.cuda.synchronize()
    return run


@pytest.fixture(scope="module")
def operands():
    g = torch.Generator(device="cuda").manual_seed(0)
    kw = {"device": "cuda", "dtype": torch.bfloat16, "generator": g}
    x = torch.randn(ROWS, D_IN, **kw)
    S = torch.randn(D_IN, RANK, **kw) / D_IN ** 0.5
    U = torch.randn(RANK, D_OUT, **kw) / RANK ** 0.5
    W = torch.randn(D_IN, D_OUT, **kw) / D_IN ** 0.5
    b = torch.randn(D_OUT, **kw)
    out = torch.empty(ROWS, D_OUT, device="cuda", dtype=torch.bfloat16)
    y = sketchcore.sketched_matmul(x, S, U, bias=b, activation="relu", scale=0.5)
    ref = torch.relu((x.float() @ S.float()) @ U.float() * 0.5 + b.float())
    assert ((y.float() - ref).norm() / ref.norm()).item() < 2e-2
    return x, S, U, W, b, out


def test_fused_forward_vs_torch_eager(operands, paired):
    """Target: ≥ 1.3× faster than torch.relu((x @ S) @ U * s + b)."""
    x, S, U, W, b, out = operands
    paired(GROUP, "fused fwd", "torch eager relu((x@S)@U*s+b)",
           timed(lambda: sketchcore.sketched_matmul(x, S, U, bias=b, activation="relu", scale=0.5, out=out)),
           timed(lambda: torch.relu((x @ S) @ U * 0.5 + b)), pairs=7, calls=5, target=1.3)


def test_fused_forward_vs_two_bare_gemms(operands, paired):
    """Target: within 1.1× of two bare cuBLAS GEMMs of the same shapes (ratio ≥ 1/1.1)."""
    x, S, U, W, b, out = operands
    z = torch.empty(ROWS, RANK, device="cuda", dtype=torch.bfloat16)
    paired(GROUP, "fused fwd", "two bare GEMMs",
           timed(lambda: sketchcore.sketched_matmul(x, S, U, bias=b, activation="relu", scale=0.5, out=out)),
           timed(lambda: torch.mm(torch.mm(x, S, out=z), U, out=out)), pairs=7, calls=5, target=1 / 1.1)


@pytest.fixture(params=[False, True], ids=["heuristic", "tuned"])
def gemm_tuning(request):
    """Runs a benchmark with cuBLASLt's first-ranked algorithms (the default) and again with
    sketchcore.set_gemm_tuning(True), which times the candidates of each shape once."""
    sketchcore.set_gemm_tuning(request.param)
    yield "tuned GEMMs" if request.param else "heuristic GEMMs"
    sketchcore.set_gemm_tuning(False)


def test_fused_forward_vs_dense(operands, paired, gemm_tuning):
    """Target: ≥ 0.7 × the FLOP ratio d_in·d_out / (T·k·(d_in + d_out)) vs relu(x @ W + b)."""
    x, S, U, W, b, out = operands
    flop_ratio = D_IN * D_OUT / (TERMS * RANK * (D_IN + D_OUT))
    paired(f"{GROUP}, {gemm_tuning}", "fused fwd", "dense relu(x@W+b)",
           timed(lambda: sketchcore.sketched_matmul(x, S, U, bias=b, activation="relu", scale=0.5, out=out)),
           timed(lambda: torch.relu(torch.addmm(b, x, W))), pairs=7, calls=5, target=0.7 * flop_ratio)


def test_sklinear_forward_backward_vs_panther(paired, gemm_tuning):
    """Target: SKLinear forward+backward ≥ 2× faster than Panther's algorithm in torch eager."""
    from test_bench_torch import PantherLinear  # Panther's forward and backward, operation for operation

    from sketchcore.torch import SKLinear
    torch.manual_seed(0)
    terms, rank = 2, RANK // 4  # 2T·k = 256 inner columns
    ours = SKLinear(D_IN, D_OUT, terms, rank, dtype=torch.bfloat16, device="cuda")
    x = torch.randn(ROWS, D_IN, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    params = [p.detach().clone().requires_grad_() for p in (ours.S1s, ours.S2s)]
    bias = ours.bias.detach().clone().requires_grad_()

    def panther():
        PantherLinear.apply(x, params[0], params[1], ours.U1s, ours.U2s, bias).sum().backward()

    paired(f"CUDA bf16 SKLinear {ROWS}x{D_IN}->{D_OUT} T{terms}xk{rank}, {gemm_tuning}", "SKLinear fwd+bwd",
           "Panther algorithm fwd+bwd", timed(lambda: ours(x).sum().backward()), timed(panther), pairs=7, calls=3,
           target=2.0)


def test_achieved_rate_against_the_measured_bf16_gemm_rate(operands):
    """Reports (no target) the fused forward's TFLOP/s next to this GPU's own bf16 GEMM rate,
    measured here on random 8192³ operands through torch.mm (cuBLAS)."""
    from conftest import INFO
    x, S, U, W, b, out = operands
    n = 8192
    g = torch.Generator(device="cuda").manual_seed(1)
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=g)
    c = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=g)
    gemm_tflops = 2 * n ** 3 / (event_median_ms(lambda: torch.mm(a, c)) * 1e-3) / 1e12
    fused_ms = event_median_ms(lambda: sketchcore.sketched_matmul(x, S, U, bias=b, activation="relu",
                                                                     scale=0.5, out=out))
    flops = 2 * ROWS * TERMS * RANK * (D_IN + D_OUT)
    fused_tflops = flops / (fused_ms * 1e-3) / 1e12
    dense_ms = event_median_ms(lambda: torch.relu(torch.addmm(b, x, W)))
    INFO[f"{GROUP} measured rates"] = (
        f"bf16 GEMM 8192³ (torch.mm) {gemm_tflops:.0f} TFLOP/s; fused fwd {fused_ms:.3f} ms = "
        f"{fused_tflops:.0f} TFLOP/s ({fused_tflops / gemm_tflops:.0%} of the GEMM rate); "
        f"dense relu(x@W+b) {dense_ms:.3f} ms")
    assert fused_tflops > 0 and gemm_tflops > 0


def graphed(fn):
    """`fn` captured ITERATIONS times into one CUDA graph (after a warm-up on a side stream, as
    torch's capture rules ask) and returned as a timed block that replays it and synchronises.
    Replaying launches no Python and no CUDA API call per kernel: what remains is device time,
    the way users run host-bound steps with torch.cuda.graphs."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(ITERATIONS):
            fn()

    def run():
        graph.replay()
        torch.cuda.synchronize()
    return run


def test_graphed_fused_forward_vs_dense(operands, paired, gemm_tuning):
    """Reported, no target of its own: the dense comparison with both sides in CUDA graphs, so
    that neither side's host overhead shows (the eager target above is host-bound on VMs).
    Tuned: the warm-up before the capture tunes the shapes; the capture replays those plans."""
    x, S, U, W, b, out = operands
    paired(f"{GROUP} in CUDA graphs, {gemm_tuning}", "fused fwd", "dense relu(x@W+b)",
           graphed(lambda: sketchcore.sketched_matmul(x, S, U, bias=b, activation="relu", scale=0.5, out=out)),
           graphed(lambda: torch.relu(torch.addmm(b, x, W))), pairs=7, calls=5)


def test_graphed_sklinear_forward_backward_vs_panther(paired, gemm_tuning):
    """Reported, no target of its own: SKLinear's training step against Panther's algorithm with
    both captured in CUDA graphs (forward, backward and gradient accumulation), device time only."""
    from test_bench_torch import PantherLinear

    from sketchcore.torch import SKLinear
    torch.manual_seed(0)
    terms, rank = 2, RANK // 4
    ours = SKLinear(D_IN, D_OUT, terms, rank, dtype=torch.bfloat16, device="cuda")
    x = torch.randn(ROWS, D_IN, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    params = [p.detach().clone().requires_grad_() for p in (ours.S1s, ours.S2s)]
    bias = ours.bias.detach().clone().requires_grad_()
    paired(f"CUDA bf16 SKLinear {ROWS}x{D_IN}->{D_OUT} T{terms}xk{rank} in CUDA graphs", "SKLinear fwd+bwd",
           "Panther algorithm fwd+bwd", graphed(lambda: ours(x).sum().backward()),
           graphed(lambda: PantherLinear.apply(x, params[0], params[1], ours.U1s, ours.U2s, bias).sum().backward()),
           pairs=7, calls=3)
