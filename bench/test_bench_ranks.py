"""Any rank runs at the speed of its aligned neighbour (issue 38, item 1): a LowRankLinear of rank r
against the same layer at rank ⌈r/16⌉·16, forward and training step, in one run.

- GPU (bf16, fp16, float32; LLaMA's 2048 → 5632 layer on 4096 rows): within 1.1× (ratio ≥ 1/1.1).
  The CUDA backend pads an inner width whose rows are not a multiple of 16 bytes (rank 375 in bf16
  ran 4.4× slower than 376 on an H200 before, on cuBLASLt's sm_75 fallback kernels).
- CPU (float32; 2048 rows, the same layer): within 1.05× (ratio ≥ 1/1.05). OpenBLAS has no
  alignment cliff (measured: rank 375 vs 384 forward 62.1 vs 62.5 ms on Zen 4), so the CPU does not
  pad; this guards that.

The aligned layer does 1–4% more arithmetic, so ratios near 1.0 are the expectation.
Run: pytest bench/test_bench_ranks.py --benchmark-only (GPU rows skip without a device).
"""
import pytest

import sketchcore

torch = pytest.importorskip("torch")
from sketchcore.torch import LowRankLinear  # noqa: E402

D_IN, D_OUT = 2048, 5632
RANKS = (375, 100, 37)  # LLaMA's param_ratio=0.25 rank, and two more with odd rows
HAS_GPU = sketchcore.build_info()["cuda"] and sketchcore.cuda_device_count() > 0 and torch.cuda.is_available()


def aligned(rank):
    return -(-rank // 16) * 16


def layers(rank, device, dtype):
    torch.manual_seed(0)
    return (LowRankLinear(D_IN, D_OUT, rank, device=device, dtype=dtype),
            LowRankLinear(D_IN, D_OUT, aligned(rank), device=device, dtype=dtype))


def step(layer, x, g, sync, repeat=1):
    def run():
        for _ in range(repeat):
            layer(x).backward(g)
        sync()
    return run


def forward(layer, x, sync, repeat=1):
    def run():
        with torch.no_grad():
            for _ in range(repeat):
                layer(x)
        sync()
    return run


@pytest.mark.parametrize("what", ["fwd", "step"])
@pytest.mark.parametrize("rank", RANKS)
def test_cpu_any_rank_within_1_05x_of_the_aligned_rank(paired, rank, what):
    odd, even = layers(rank, "cpu", torch.float32)
    x = torch.randn(2048, D_IN, requires_grad=True)
    g = torch.randn(2048, D_OUT)
    none = lambda: None  # noqa: E731
    make = (lambda layer: forward(layer, x, none)) if what == "fwd" else (lambda layer: step(layer, x, g, none))
    paired(f"CPU float32 LowRankLinear {D_IN}->{D_OUT}, 2048 rows", f"rank {rank} {what}",
           f"rank {aligned(rank)} {what}", make(odd), make(even), pairs=7, calls=3, target=1 / 1.05)


@pytest.mark.skipif(not HAS_GPU, reason="needs the CUDA backend and a CUDA device")
@pytest.mark.parametrize("what", ["fwd", "step"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("rank", RANKS)
def test_gpu_any_rank_within_1_1x_of_the_aligned_rank(paired, rank, dtype, what):
    dt = getattr(torch, dtype)
    odd, even = layers(rank, "cuda", dt)
    x = torch.randn(4096, D_IN, device="cuda", dtype=dt, requires_grad=True)
    g = torch.randn(4096, D_OUT, device="cuda", dtype=dt)
    sync = torch.cuda.synchronize
    make = ((lambda layer: forward(layer, x, sync, 10)) if what == "fwd"
            else (lambda layer: step(layer, x, g, sync, 5)))
    paired(f"CUDA {dtype} LowRankLinear {D_IN}->{D_OUT}, 4096 rows", f"rank {rank} {what}",
           f"rank {aligned(rank)} {what}", make(odd), make(even), pairs=7, calls=5, target=1 / 1.1)
