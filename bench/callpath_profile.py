"""Where the host time of a tiny sketched call goes on the CPU (issue 25): per-call medians of
the sketched layers and the bare call against what a user would write instead, the Python
functions each one runs (cProfile, by own time), torch's view of the same calls (torch.profiler,
CPU activity), and what the first call of each layer costs in a fresh process (and which modules
it imports). One thread for torch and for sketchcore. Run by hand:

    python bench/callpath_profile.py [--quick]

The ratio targets themselves are measured by bench/test_bench_callpath.py (paired blocks);
this script is the breakdown behind them.
"""
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import torch

import sketchcore
from sketchcore.torch import LowRankLinear, SKLinear

QUICK = "--quick" in sys.argv


def cases():
    """name -> (sketchcore function, the baseline a user would write instead)."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SKLinear's parameter-count warning at 64 -> 64
        sk = SKLinear(64, 64, num_terms=1, low_rank=4)
    lr = LowRankLinear(64, 64, rank=8)
    pair = torch.nn.Sequential(torch.nn.Linear(64, 8, bias=False), torch.nn.Linear(8, 64))
    x = torch.randn(8, 64, requires_grad=True)
    xs, S, U = torch.randn(8, 64), torch.randn(64, 8), torch.randn(8, 64)
    xn, Sn, Un = xs.numpy(), S.numpy(), U.numpy()

    def step(m):
        return lambda: m(x).sum().backward()

    def no_grad(m):
        def run():
            with torch.no_grad():
                m(x)
        return run

    return {
        "SKLinear fwd+bwd": (step(sk), step(pair)),
        "LowRankLinear fwd+bwd": (step(lr), step(pair)),
        "SKLinear no_grad fwd": (no_grad(sk), no_grad(pair)),
        "LowRankLinear no_grad fwd": (no_grad(lr), no_grad(pair)),
        "sketched_matmul torch": (lambda: sketchcore.sketched_matmul(xs, S, U), lambda: torch.mm(torch.mm(xs, S), U)),
        "sketched_matmul numpy": (lambda: sketchcore.sketched_matmul(xn, Sn, Un), lambda: (xn @ Sn) @ Un),
    }


def median_us(fn, calls):
    for _ in range(calls // 5):
        fn()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def timings(table):
    print("== per-call medians (µs), alternating blocks; ratio = sketchcore / baseline")
    blocks, calls = (3, 300) if QUICK else (7, 1000)
    for name, (ours, baseline) in table.items():
        a, b = [], []
        for i in range(blocks):
            order = ((ours, a), (baseline, b)) if i % 2 == 0 else ((baseline, b), (ours, a))
            for fn, out in order:
                out.append(median_us(fn, calls))
        ratios = sorted(x / y for x, y in zip(a, b))
        print(f"{name:<28} {statistics.median(a):8.2f} vs {statistics.median(b):8.2f}   "
              f"ratio {statistics.median(ratios):5.2f} (range {ratios[0]:.2f}-{ratios[-1]:.2f})")


def python_profile(table):
    for name, (ours, _) in table.items():
        profiler = cProfile.Profile()
        for _ in range(200):
            ours()
        profiler.enable()
        for _ in range(2000):
            ours()
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(16)
        text = out.getvalue()
        print(f"== cProfile: {name}, 2000 calls, by own time")
        print(text[text.index("   ncalls"):].rstrip() if "   ncalls" in text else text)


def torch_profile(table):
    from torch.profiler import ProfilerActivity, profile
    for name in ("SKLinear fwd+bwd", "LowRankLinear fwd+bwd", "sketched_matmul torch"):
        ours = table[name][0]
        for _ in range(200):
            ours()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(500):
                ours()
        print(f"== torch.profiler (CPU): {name}, 500 calls, by self CPU time")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=55))


#: A fresh process's first and second forward + backward of one layer (argv[1]) on 1 thread:
#: prints both times in seconds, then the modules the first call imported (JSON). Also run by
#: bench/test_bench_callpath.py.
FIRST_CALL = textwrap.dedent("""
    import json, sys, time, warnings
    import torch
    import sketchcore.torch as sct
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    name = sys.argv[1]
    if name == "SKLinear":
        m, x = sct.SKLinear(64, 64, 1, 4), torch.randn(8, 64, requires_grad=True)
    elif name == "LowRankLinear":
        m, x = sct.LowRankLinear(64, 64, rank=8), torch.randn(8, 64, requires_grad=True)
    elif name == "SKConv2d":
        m, x = sct.SKConv2d(8, 8, (3, 3), num_terms=1, low_rank=2), torch.randn(2, 8, 6, 6, requires_grad=True)
    else:
        m, x = sct.RandMultiHeadAttention(32, 4, 16), torch.randn(2, 5, 32, requires_grad=True)
    call = (lambda: m(x).sum().backward()) if name != "RandMultiHeadAttention" else (
        lambda: m(x, x, x)[0].sum().backward())
    before = set(sys.modules)
    t0 = time.perf_counter(); call(); t1 = time.perf_counter(); call(); t2 = time.perf_counter()
    print(t1 - t0, t2 - t1, json.dumps(sorted(set(sys.modules) - before)))
""")


def first_call(name):
    """(first, second, modules imported by the first call) of FIRST_CALL in a fresh process."""
    result = subprocess.run([sys.executable, "-c", FIRST_CALL, name], capture_output=True, text=True, check=True,
                            env=dict(os.environ, PYTHONWARNINGS="ignore"))
    first, second, modules = result.stdout.split(" ", 2)
    return float(first), float(second), json.loads(modules)


def first_calls():
    print("== first call vs second call, fresh process each (forward + backward)")
    for name in ("SKLinear", "LowRankLinear", "SKConv2d", "RandMultiHeadAttention"):
        first, second, new = first_call(name)
        tops = sorted({n.split(".")[0] + ("." + n.split(".")[1] if n.startswith("torch.") and "." in n else "")
                       for n in new})
        print(f"{name:<24} first {1e3 * first:8.1f} ms  second {1e3 * second:6.2f} ms  "
              f"modules imported by the first call: {len(new)} {tops[:12]}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    sketchcore.set_num_threads(1)
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, torch {torch.__version__}, NumPy "
          f"{np.__version__}, sketchcore {sketchcore.__version__}, {os.cpu_count()} CPUs, 1 thread")
    table = cases()
    timings(table)
    first_calls()
    python_profile(table)
    torch_profile(table)
