"""Where a GPU call's time goes: host overhead per call (and its parts), the kernels of the
benchmark's forward and of SKLinear's forward+backward, and dropout's epilogue cost (a first
call inside a CUDA-graph capture is a test: tests/gpu/test_gpu_capture.py). Prints plain tables; run by bench/gpu/run.sh's
`profile` step: python bench/gpu/where_time_goes.py (not profile.py: that name shadows the
standard library's profile module, which torch.profiler imports).
"""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from gpu_timing import event_median_ms, profiled  # noqa: E402 - bench/ on the path first

import sketchcore
from sketchcore.torch import SKLinear


def per_call_us(fn, calls=2000):
    """Host-side microseconds per call of fn, in a loop ending with one synchronisation."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def host_overhead():
    print("== host time per call, tiny CUDA problem (64x64 -> 64, k 8), float32")
    x, S, U, b = (torch.randn(*s, device="cuda") for s in ((64, 64), (64, 8), (8, 64), (64,)))
    out = torch.empty(64, 64, device="cuda")
    rows = [
        ("torch.mm(x, S)", lambda: torch.mm(x, S)),
        ("torch eager relu((x@S)@U+b)", lambda: torch.relu((x @ S) @ U + b)),
        ("sketched_matmul(x, S, U)", lambda: sketchcore.sketched_matmul(x, S, U)),
        ("sketched_matmul(..., bias, relu, out=)", lambda: sketchcore.sketched_matmul(
            x, S, U, bias=b, activation="relu", out=out)),
        ("x.__dlpack__(stream=1)", lambda: x.__dlpack__(stream=1)),
        ("torch._C._to_dlpack_versioned(x)", lambda: torch._C._to_dlpack_versioned(x)),
        ("torch.cuda.current_stream()", lambda: torch.cuda.current_stream(x.device).cuda_stream),
        ("torch.empty(64, 64, cuda)", lambda: torch.empty(64, 64, device="cuda")),
    ]
    layer = SKLinear(64, 64, 2, 4, device="cuda")
    xg = x.detach().requires_grad_()
    rows.append(("SKLinear(64, 64, T2, k4) fwd+bwd", lambda: layer(xg).sum().backward()))
    from test_bench_torch import PantherLinear
    S1, S2 = (p.detach().clone().requires_grad_() for p in (layer.S1s, layer.S2s))
    bias = layer.bias.detach().clone().requires_grad_()
    rows.append(("Panther's algorithm, same layer, fwd+bwd",
                 lambda: PantherLinear.apply(xg, S1, S2, layer.U1s, layer.U2s, bias).sum().backward()))
    g, z = torch.randn(64, 64, device="cuda"), torch.empty(64, 8, device="cuda")
    sketchcore.sketched_matmul(x, S, U, intermediate=z)
    rows.append(("sketched_matmul_backward(x, S, U, bias)", lambda: sketchcore.sketched_matmul_backward(
        g, x, S, U, z, bias=b)))
    try:
        import cupy
        xc, Sc, Uc = cupy.asarray(x), cupy.asarray(S), cupy.asarray(U)
        rows.append(("sketched_matmul on CuPy arrays", lambda: sketchcore.sketched_matmul(xc, Sc, Uc)))
        rows.append(("cupy.matmul(x, S)", lambda: cupy.matmul(xc, Sc)))
    except ImportError:
        pass
    for name, fn in rows:
        print(f"  {name:<40} {per_call_us(fn):8.1f} µs")


def kernel_table(title, fn, iterations=10):
    prof = profiled(fn, iterations, warmup=3)
    print(f"== {title}: {iterations} iterations, by device time")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=70))


def kernels():
    g = torch.Generator(device="cuda").manual_seed(0)
    kw = {"device": "cuda", "dtype": torch.bfloat16, "generator": g}
    x = torch.randn(8192, 4096, **kw)
    S, U, b = torch.randn(4096, 256, **kw), torch.randn(256, 4096, **kw), torch.randn(4096, **kw)
    out = torch.empty(8192, 4096, device="cuda", dtype=torch.bfloat16)
    z = torch.empty(8192, 256, device="cuda", dtype=torch.bfloat16)
    fused = lambda: sketchcore.sketched_matmul(x, S, U, bias=b, activation="relu", scale=0.5, out=out)  # noqa: E731
    bare = lambda: torch.mm(torch.mm(x, S, out=z), U, out=out)  # noqa: E731
    kernel_table("fused forward bf16 8192x4096->4096 k256", fused)
    kernel_table("two bare torch.mm", bare)
    print(f"== event-timed medians: fused {event_median_ms(fused):.3f} ms, bare {event_median_ms(bare):.3f} ms, "
          f"host per fused call {per_call_us(fused, 200):.1f} µs")
    drop = lambda: sketchcore.sketched_matmul(x, S, U, bias=b, activation="relu", dropout_p=0.1, seed=1,  # noqa: E731
                                              out=out)
    gelu = lambda: sketchcore.sketched_matmul(x, S, U, bias=b, activation="gelu", out=out)  # noqa: E731
    print(f"== epilogue: relu {event_median_ms(fused):.3f} ms, relu+dropout {event_median_ms(drop):.3f} ms, "
          f"erf-gelu (own kernel) {event_median_ms(gelu):.3f} ms")
    layer = SKLinear(4096, 4096, 2, 64, dtype=torch.bfloat16, device="cuda")
    xg = x.detach().requires_grad_()
    kernel_table("SKLinear fwd+bwd bf16 T2 k64", lambda: layer(xg).sum().backward())


if __name__ == "__main__":
    torch.backends.cuda.matmul.allow_tf32 = False
    host_overhead()
    kernels()
