"""Where the host time of a training step goes on a CUDA device: SKLinear's forward+backward
and Panther's algorithm on a layer small enough that the GPU waits for the host (64x64,
T2 k4) and at the benchmark's shape, as Python functions (cProfile) and as torch/CUDA runtime
calls (torch.profiler, by self CPU time). Run by hand or by bench/gpu/run.sh's `host` step:
python bench/gpu/host_profile.py
"""
import cProfile
import os
import pstats
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from gpu_timing import profiled  # noqa: E402 - bench/ on the path first
from test_bench_torch import PantherLinear  # noqa: E402

from sketchcore.torch import SKLinear  # noqa: E402


def steps(rows, d, terms, rank, dtype):
    layer = SKLinear(d, d, terms, rank, dtype=dtype, device="cuda")
    x = torch.randn(rows, d, device="cuda", dtype=dtype, requires_grad=True)
    S1, S2 = (p.detach().clone().requires_grad_() for p in (layer.S1s, layer.S2s))
    bias = layer.bias.detach().clone().requires_grad_()
    return {"SKLinear": lambda: layer(x).sum().backward(),
            "Panther": lambda: PantherLinear.apply(x, S1, S2, layer.U1s, layer.U2s, bias).sum().backward()}


def report(title, fn, iterations=50):
    prof = profiled(fn, iterations, warmup=10)
    print(f"== {title}: {iterations} steps, by self CPU time")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=28, max_name_column_width=60))
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(iterations):
        fn()
    torch.cuda.synchronize()
    profiler.disable()
    print(f"== {title}: {iterations} steps, Python functions by own time")
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(22)


if __name__ == "__main__":
    for shape in ((64, 64, 2, 4, torch.float32), (8192, 4096, 2, 64, torch.bfloat16)):
        for name, fn in steps(*shape).items():
            report(f"{name} fwd+bwd {shape}", fn)
