"""The int8 sketched GEMM against its peers and the machine's int8 peak (issue 49).

    python bench/int8_gemm.py [--rounds 15] [--threads N] [--json PATH] [--quick]

For each shape (rows × d_in → rank → d_out; decode: 1 and 8 rows, prefill: 512 rows) and on the
same data, times, round by round and interleaved:
  - ``int8``: ``sketchcore.int8_sketched_matmul(x, S, U)`` (int8 factors, x and the intermediate
    quantized per row);
  - ``f32``: ``sketchcore.sketched_matmul(x, S_f, U_f)`` on the dequantized float32 factors;
  - ``torch_dyn``: the pair of ``nn.Linear`` of the same factors after
    ``torch.ao.quantization.quantize_dynamic(..., dtype=torch.qint8)`` (fbgemm), on a torch x.
Each time is the median of a round's calls; the table gives the median, min and max over rounds,
the ratios torch_dyn/int8 and f32/int8 per round (median [min, max]), and the int8 call's
multiply-adds per second as a fraction of the peak: wall clock on all threads, and per second of
thread CPU time on one thread (what the kernels achieve while they run, whatever the load).

The peak: ``sketchcore._int8.int8_peak_macs_per_second`` runs the family's multiply-add
instruction on operands held in registers (no loads) on one thread: VPDPBUSD on 24 independent
accumulators (AVX-512 VNNI), or TDPBUSD on 4 tiles (AMX); the machine's peak is that loop run on
every thread at once (Python threads; the loop releases the GIL), summed, median of 5 runs. With
the AMX family the table gives the int8 call's fraction of both the AMX and the AVX-512 VNNI peak.

The GEMMs alone: ``sketchcore._int8._gemm_for_bench`` (a private hook) times each of the call's two
products by itself on the same data, round by round beside the others: activations quantized
beforehand (untimed), int32 sums dequantized to float32 (timed); the second product on the first
one's output. Their MAC/s over the peak is what the GEMM kernels reach; the rest of the call is
quantizing x, requantizing the intermediate and the output's allocation. Beside them, in the same
rounds, torch's ``torch._int_mm`` (oneDNN's int8 GEMM, int32 sums, nothing dequantized) on the same
shapes: what the vendor's library reaches on this machine.
Results go to stdout as Markdown (and JSON with --json).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import threading
import time


def _threads_argument() -> str:
    """--threads N as given (before NumPy and torch load: their BLAS and OpenMP pools read the
    environment once), else the CPU count."""
    for i, arg in enumerate(sys.argv):
        if arg == "--threads" and i + 1 < len(sys.argv):
            return sys.argv[i + 1]
        if arg.startswith("--threads="):
            return arg.split("=", 1)[1]
    return str(os.cpu_count() or 1)


# Every thread pool the same size as sketchcore's: a BLAS pool of 2 busy-waiting threads beside
# a 1-thread run slows both down badly on a loaded 2-core machine.
for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, _threads_argument())

import numpy as np  # noqa: E402
import torch  # noqa: E402

import sketchcore  # noqa: E402
from sketchcore import _int8  # noqa: E402

SHAPES = [  # (rows, d_in, rank, d_out)
    (1, 1024, 256, 1024),
    (8, 1024, 256, 1024),
    (1, 4096, 1024, 4096),
    (8, 4096, 1024, 4096),
    (512, 1024, 256, 1024),
    (512, 4096, 1024, 4096),
]


# Multiply-adds per iteration of each family's register loop, and iterations of about 0.2 s.
PEAK_MACS_PER_ITERATION = {"amx": 4 * 16 * 16 * 64, "avx512_vnni": 24 * 64, "avx_vnni": 12 * 32}
PEAK_ITERATIONS = {"amx": 2_000_000, "avx512_vnni": 20_000_000, "avx_vnni": 20_000_000}


def cpu_time_peak(isa: str) -> float:
    """The register loop's multiply-adds per second of the calling thread's CPU time (robust to
    other processes taking the core: time.thread_time does not count while it is descheduled)."""
    iterations = PEAK_ITERATIONS[isa]
    start = time.thread_time()
    _int8.int8_peak_macs_per_second(isa, iterations)
    return iterations * PEAK_MACS_PER_ITERATION[isa] / (time.thread_time() - start)


def cpu_time_rate(call, macs: int, seconds: float = 0.5) -> float:
    """Multiply-adds per second of thread CPU time of `call` on one sketchcore thread."""
    threads = sketchcore.get_num_threads()
    sketchcore.set_num_threads(1)
    try:
        call()
        start, calls = time.thread_time(), 0
        while time.thread_time() - start < seconds:
            call()
            calls += 1
        return macs * calls / (time.thread_time() - start)
    finally:
        sketchcore.set_num_threads(threads)


def peak_macs(isa: str, threads: int) -> tuple[float, float]:
    """(one thread, all threads together) int8 multiply-adds per second of the register loop."""
    iterations = PEAK_ITERATIONS[isa]
    single = statistics.median(_int8.int8_peak_macs_per_second(isa, iterations) for _ in range(5))
    totals = []
    for _ in range(5):
        results = [0.0] * threads

        def run(i: int) -> None:
            results[i] = _int8.int8_peak_macs_per_second(isa, iterations)

        workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        totals.append(sum(results))
    return single, statistics.median(totals)


def timed(call, repeats: int) -> float:
    """Median seconds of `repeats` calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def bench_shape(rows: int, d_in: int, rank: int, d_out: int, rounds: int, rng: np.random.Generator) -> dict:
    x = rng.standard_normal((rows, d_in)).astype(np.float32)
    s_w = (rng.standard_normal((d_in, rank)) / np.sqrt(d_in)).astype(np.float32)
    u_w = (rng.standard_normal((rank, d_out)) / np.sqrt(rank)).astype(np.float32)
    S, U = sketchcore.Int8Factor(*sketchcore.quantize_int8(s_w)), sketchcore.Int8Factor(*sketchcore.quantize_int8(u_w))
    s_f, u_f = (S.q * S.scale).astype(np.float32), (U.q * U.scale).astype(np.float32)  # the same values in float32
    pair = torch.nn.Sequential(torch.nn.Linear(d_in, rank, bias=False), torch.nn.Linear(rank, d_out, bias=False))
    with torch.no_grad():
        pair[0].weight.copy_(torch.from_numpy(s_f.T))
        pair[1].weight.copy_(torch.from_numpy(u_f.T))
    dynamic = torch.ao.quantization.quantize_dynamic(pair, {torch.nn.Linear}, dtype=torch.qint8)
    xt = torch.from_numpy(x)
    calls = {
        "int8": lambda: sketchcore.int8_sketched_matmul(x, S, U),
        "f32": lambda: sketchcore.sketched_matmul(x, s_f, u_f),
        "torch_dyn": lambda: dynamic(xt),
    }
    macs = rows * (d_in * rank + rank * d_out)
    repeats = max(3, min(200, int(2e9 / max(macs, 1) / 50)))
    with torch.inference_mode():
        for call in calls.values():  # warm-up: packing, threads, caches
            timed(call, 3)
        z, _ = _int8._gemm_for_bench(x, S, 1)  # the second product's activations: the first one's output
        gemms = {"gemm1": lambda: _int8._gemm_for_bench(x, S, repeats)[1],
                 "gemm2": lambda: _int8._gemm_for_bench(z, U, repeats)[1]}
        # The vendor's int8 GEMM on the same shapes (oneDNN's, int32 sums without dequantization):
        # what the machine gives a library that is not ours.
        codes = [torch.from_numpy(np.ascontiguousarray(a)) for a in (_int8_codes(x), S.q, _int8_codes(z), U.q)]
        if _int_mm_runs(codes[0], codes[1]):
            gemms["torch_int_mm1"] = lambda: [timed(lambda: torch._int_mm(codes[0], codes[1]), repeats)]
            gemms["torch_int_mm2"] = lambda: [timed(lambda: torch._int_mm(codes[2], codes[3]), repeats)]
        times: dict[str, list[float]] = {name: [] for name in (*calls, *gemms)}
        for _ in range(rounds):
            for name, call in calls.items():
                times[name].append(timed(call, repeats))
            for name, gemm in gemms.items():
                times[name].append(statistics.median(gemm()))
        reference = (x.astype(np.float64) @ s_w) @ u_w
        errors = {name: float(np.linalg.norm(np.asarray(call()) - reference) / np.linalg.norm(reference))
                  for name, call in calls.items()}
    one_thread = statistics.median(cpu_time_rate(calls["int8"], macs) for _ in range(3))
    ratios = {f"{peer}/int8": summary([p / i for p, i in zip(times[peer], times["int8"])]) for peer in ("torch_dyn", "f32")}
    return {"rows": rows, "d_in": d_in, "rank": rank, "d_out": d_out, "macs": macs, "repeats": repeats,
            "seconds": {name: summary(v) for name, v in times.items()}, "ratios": ratios,
            "int8_macs_per_second": macs / statistics.median(times["int8"]),
            "gemms_alone_macs_per_second": macs / (statistics.median(times["gemm1"]) + statistics.median(times["gemm2"])),
            "torch_int_mm_macs_per_second": (macs / (statistics.median(times["torch_int_mm1"])
                                                     + statistics.median(times["torch_int_mm2"]))
                                             if "torch_int_mm1" in times else None),
            "int8_macs_per_cpu_second_one_thread": one_thread,
            "relative_error_vs_float64_unquantized": errors}


def _int8_codes(a) -> np.ndarray:
    """`a` as symmetric int8 codes of one scale (operands for the vendor's GEMM; only their
    shape and range matter to its time)."""
    a = np.asarray(a)
    return np.clip(np.rint(a / np.abs(a).max() * 127), -127, 127).astype(np.int8)


def _int_mm_runs(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether this torch has a CPU ``torch._int_mm`` for these operands (it is private and has
    had shape limits)."""
    try:
        torch._int_mm(a, b)
    except (AttributeError, RuntimeError):
        return False
    return True


def peak_of(isa: str, threads: int) -> dict:
    one, together = peak_macs(isa, threads)
    return {"isa": isa, "one_thread": one, "all_threads": together,
            "cpu_time": statistics.median(cpu_time_peak(isa) for _ in range(5))}


def peak_line(peak: dict, threads: int) -> str:
    instruction = "TDPBUSD tile" if peak["isa"] == "amx" else "VPDPBUSD register"
    return (f"Peak ({instruction} loop, `{peak['isa']}`): {peak['one_thread'] / 1e9:.1f} G int8 MAC/s on one thread, "
            f"{peak['all_threads'] / 1e9:.1f} G MAC/s on {threads} threads together "
            f"({2 * peak['all_threads'] / 1e9:.0f} GOPS); per second of thread CPU time (not counting time "
            f"descheduled by other processes): {peak['cpu_time'] / 1e9:.1f} G MAC/s.")


def fractions(r: dict, peak: dict | None) -> str:
    """The int8 call's wall-clock and one-thread CPU-time fractions of `peak` (two cells)."""
    if peak is None:
        return " | "
    return (f"{r['int8_macs_per_second'] / peak['all_threads']:.2f} | "
            f"{r['int8_macs_per_cpu_second_one_thread'] / peak['cpu_time']:.2f}")


def markdown(report: dict) -> str:
    peak, vnni = report["peak"], report.get("vnni_peak")
    header = "| rows | d_in → r → d_out | int8 µs (min–max) | f32 µs | torch dyn-int8 µs | torch_dyn/int8 | f32/int8 | int8 / peak | 1-thread CPU-time / peak |"
    rule = "|---:|---|---:|---:|---:|---:|---:|---:|---:|"
    if vnni:
        header += " int8 / VNNI peak | 1-thread CPU-time / VNNI peak |"
        rule += "---:|---:|"
    lines = [
        f"# int8 sketched GEMM, {report['machine']}",
        "",
        f"int8 kernels: `{report['isa']}`; threads: {report['threads']} (sketchcore and torch); "
        f"load average at start: {report['load_average']}; rounds: {report['rounds']}.",
        peak_line(peak, report["threads"]) if peak["isa"] else "Peak: none (this family has no dot-product instruction).",
        *([peak_line(vnni, report["threads"])] if vnni else []),
        "`int8 / peak` = the int8 call's MAC/s (wall clock, all threads) over the all-threads peak; "
        "`1-thread CPU-time / peak` = its MAC/s per second of CPU time on one thread over the "
        "CPU-time peak (the load-independent measure of the kernels' efficiency).",
        "",
        header + " rel. err int8 / torch_dyn |",
        rule + "---:|",
    ]
    for r in report["results"]:
        s, q = r["seconds"], r["ratios"]

        def us(name: str) -> str:
            return f"{s[name]['median'] * 1e6:.1f}"

        lines.append(
            f"| {r['rows']} | {r['d_in']} → {r['rank']} → {r['d_out']} | {us('int8')} "
            f"({s['int8']['min'] * 1e6:.1f}–{s['int8']['max'] * 1e6:.1f}) | {us('f32')} | {us('torch_dyn')} | "
            f"{q['torch_dyn/int8']['median']:.2f} [{q['torch_dyn/int8']['min']:.2f}, {q['torch_dyn/int8']['max']:.2f}] | "
            f"{q['f32/int8']['median']:.2f} [{q['f32/int8']['min']:.2f}, {q['f32/int8']['max']:.2f}] | "
            f"{fractions(r, peak if peak['isa'] else None)} | "
            + (f"{fractions(r, vnni)} | " if vnni else "") +
            f"{r['relative_error_vs_float64_unquantized']['int8']:.4f} / "
            f"{r['relative_error_vs_float64_unquantized']['torch_dyn']:.4f} |")
    if peak["isa"]:
        lines += gemms_alone(report)
    return "\n".join(lines)


def gemms_alone(report: dict) -> list[str]:
    """The table of the two GEMMs timed alone, as fractions of the all-threads peak."""
    peak = report["peak"]["all_threads"]
    lines = ["", f"The GEMMs alone (`_int8._gemm_for_bench`, median µs over rounds; peak as above, "
             f"`{report['peak']['isa']}`, {peak / 1e9:.1f} G MAC/s):", "",
             "| rows | d_in → r → d_out | GEMM 1 µs | GEMM 2 µs | GEMMs / call time | GEMMs alone / peak | call / peak "
             "| torch `_int_mm` (oneDNN) 1 + 2 µs | `_int_mm` / peak |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in report["results"]:
        s = r["seconds"]
        gemm1, gemm2, call = s["gemm1"]["median"], s["gemm2"]["median"], s["int8"]["median"]
        vendor = r.get("torch_int_mm_macs_per_second")
        vendor_cells = (f"{(s['torch_int_mm1']['median'] + s['torch_int_mm2']['median']) * 1e6:.1f} | "
                        f"{vendor / peak:.2f}" if vendor else "– | –")
        lines.append(f"| {r['rows']} | {r['d_in']} → {r['rank']} → {r['d_out']} | {gemm1 * 1e6:.1f} | "
                     f"{gemm2 * 1e6:.1f} | {(gemm1 + gemm2) / call:.2f} | "
                     f"{r['gemms_alone_macs_per_second'] / peak:.2f} | {r['int8_macs_per_second'] / peak:.2f} | "
                     f"{vendor_cells} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", default=None, help="also write the results as JSON to this path")
    parser.add_argument("--quick", action="store_true", help="the two smallest shapes, 3 rounds (a smoke run)")
    args = parser.parse_args()
    sketchcore.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    isa = _int8.int8_gemm_isa()
    peak_isa = isa if isa in PEAK_MACS_PER_ITERATION else None
    nan = float("nan")
    peak = peak_of(peak_isa, args.threads) if peak_isa else {"isa": None, "one_thread": nan, "all_threads": nan,
                                                              "cpu_time": nan}
    rng = np.random.default_rng(0)
    shapes, rounds = (SHAPES[:2], 3) if args.quick else (SHAPES, args.rounds)
    report = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
        "isa": isa, "threads": args.threads, "rounds": rounds,
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "torch": torch.__version__, "quantized_engine": torch.backends.quantized.engine,
        "peak": peak,
        "vnni_peak": peak_of("avx512_vnni", args.threads) if isa == "amx" else None,
        "results": [bench_shape(*shape, rounds, rng) for shape in shapes],
    }
    report["load_average_end"] = [round(v, 2) for v in os.getloadavg()]
    print(markdown(report))
    print(f"\nload average at the end: {report['load_average_end']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
