"""The default command: a short benchmark of ``sketched_matmul`` on this machine.

It leads with where the library wins: the fused layer ``relu(scale·(x @ S) @ U + b)`` in one
call against the same expression written in NumPy (S, U packed over terms, each step a separate
array) and against the dense layer ``relu(x @ W + b)`` it replaces, with the peak memory each
allocates (NumPy's arrays traced by tracemalloc; sketchcore's output plus its pooled
temporaries). Then the bare product ``(x @ S) @ U`` without an epilogue, where both sides run
the same two BLAS calls and the best sketchcore can do is tie. Float32, median times (each side
timed in three rounds that alternate with the others'), relative errors against a float64
reference. Runs in about a minute on 2 cores with the defaults.
"""
from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc
from dataclasses import dataclass

import numpy as np

import sketchcore

# (batch, d_in, d_out, T, k): the headline layer first.
DEFAULT_SHAPES = (
    (4096, 4096, 4096, 4, 64),
    (1024, 2048, 2048, 4, 32),
    (256, 1024, 1024, 8, 16),
    (32, 4096, 4096, 2, 128),
)
QUICK_SHAPES = ((256, 512, 512, 2, 16), (64, 1024, 256, 4, 8))


@dataclass
class Row:
    shape: tuple[int, int, int, int, int]
    sketchcore_s: float
    sketchcore_spread: float
    numpy_sketch_s: float
    numpy_dense_s: float
    sketchcore_err: float
    numpy_err: float


#: Rounds of the compared sides (see compare_times).
ROUNDS = 3


def timed_calls(fn, repeats: int, budget_s: float, warm_calls: int = 2) -> list[float]:
    """Up to `repeats` timed calls, stopping early once `budget_s` seconds have been spent
    (at least 3 calls).

    Warm-up first, at least `warm_calls` calls and 0.2 s: NumPy and sketchcore each have an
    OpenBLAS thread pool whose threads keep spinning for a moment after a call and slow the
    other one down; warming up also reaches the steady state of back-to-back calls."""
    start, warm = time.perf_counter(), 0
    while warm < warm_calls or time.perf_counter() - start < 0.2:
        fn()
        warm += 1
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < repeats and (len(times) < 3 or time.perf_counter() - start < budget_s):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def compare_times(fns, repeats: int, budget_s: float) -> list[tuple[float, float]]:
    """For each of `fns`: the median and (max − min) of its timed calls, taken in ROUNDS
    rounds that visit every side in turn (each round in a rotated order), with `repeats` calls
    and `budget_s` seconds split between them. A noisy machine's slow moments then fall on
    every side alike: timed one after the other, one side's block could land in a slow minute
    and the other's not (a 2-vCPU VM read the same bare product at 0.70× and 1.00× so)."""
    calls: list[list[float]] = [[] for _ in fns]
    per_round = max(1, -(-repeats // ROUNDS))
    for r in range(ROUNDS):
        for i in [(r + j) % len(fns) for j in range(len(fns))]:
            # One warm-up call after the first round: the first-call costs are paid by then.
            calls[i] += timed_calls(fns[i], per_round, budget_s / ROUNDS, 2 if r == 0 else 1)
    return [(statistics.median(times), max(times) - min(times)) for times in calls]


@dataclass
class FusedRow:
    shape: tuple[int, int, int, int, int]
    sketchcore_s: float
    numpy_s: float
    dense_s: float
    sketchcore_bytes: int
    numpy_bytes: int
    dense_bytes: int
    sketchcore_err: float
    numpy_err: float


def peak_bytes(fn) -> int:
    """Peak bytes one call allocates: NumPy arrays (tracemalloc) plus sketchcore's pool."""
    sketchcore.memory.reset_peak()
    pool_before = sketchcore.memory.stats()["current_bytes"]
    tracemalloc.start()
    try:
        result = fn()
        _, traced = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del result
    return int(traced + sketchcore.memory.stats()["peak_bytes"] - pool_before)


def relative_error(y: np.ndarray, ref: np.ndarray) -> float:
    denom = np.linalg.norm(ref)
    return float(np.linalg.norm(y.astype(np.float64) - ref) / (denom if denom > 0 else 1.0))


def run_shape(shape, repeats: int, budget_s: float, rng: np.random.Generator) -> Row:
    batch, d_in, d_out, terms, k = shape
    x = rng.standard_normal((batch, d_in), dtype=np.float32)
    S = rng.standard_normal((terms, d_in, k), dtype=np.float32) / np.float32(np.sqrt(k))
    U = rng.standard_normal((terms, k, d_out), dtype=np.float32) / np.float32(np.sqrt(d_in))
    W = rng.standard_normal((d_in, d_out), dtype=np.float32) / np.float32(np.sqrt(d_in))
    # What a NumPy user writes: the terms packed side by side, two products.
    S_packed = np.ascontiguousarray(S.transpose(1, 0, 2).reshape(d_in, terms * k))
    U_packed = U.reshape(terms * k, d_out)

    # Both sides allocate their result, as a user's call would.
    (sc_s, sc_spread), (np_s, _), (dense_s, _) = compare_times(
        [lambda: sketchcore.sketched_matmul(x, S, U), lambda: (x @ S_packed) @ U_packed, lambda: x @ W],
        repeats, budget_s)

    reference = (x.astype(np.float64) @ S_packed.astype(np.float64)) @ U_packed.astype(np.float64)
    return Row(shape, sc_s, sc_spread, np_s, dense_s,
               relative_error(sketchcore.sketched_matmul(x, S, U), reference),
               relative_error((x @ S_packed) @ U_packed, reference))


def run_fused(shape, repeats: int, budget_s: float, rng: np.random.Generator) -> FusedRow:
    """The layer relu(scale·(x@S)@U + b): fused, NumPy's unfused expression, dense."""
    batch, d_in, d_out, terms, k = shape
    x = rng.standard_normal((batch, d_in), dtype=np.float32)
    S = rng.standard_normal((terms, d_in, k), dtype=np.float32) / np.float32(np.sqrt(k))
    U = rng.standard_normal((terms, k, d_out), dtype=np.float32) / np.float32(np.sqrt(d_in))
    W = rng.standard_normal((d_in, d_out), dtype=np.float32) / np.float32(np.sqrt(d_in))
    b = rng.standard_normal(d_out, dtype=np.float32)
    S_packed = np.ascontiguousarray(S.transpose(1, 0, 2).reshape(d_in, terms * k))
    U_packed = U.reshape(terms * k, d_out)
    scale = np.float32(1.0 / terms)

    def fused():
        return sketchcore.sketched_matmul(x, S, U, bias=b, activation="relu", scale=float(scale))

    def unfused():
        return np.maximum((x @ S_packed) @ U_packed * scale + b, 0)

    def dense():
        return np.maximum(x @ W + b, 0)

    (sc_s, _), (np_s, _), (dense_s, _) = compare_times([fused, unfused, dense], repeats, budget_s)
    z = (x.astype(np.float64) @ S_packed.astype(np.float64)) @ U_packed.astype(np.float64)
    reference = np.maximum(z * float(scale) + b, 0)
    return FusedRow(shape, sc_s, np_s, dense_s, peak_bytes(fused), peak_bytes(unfused), peak_bytes(dense),
                    relative_error(fused(), reference), relative_error(unfused(), reference))


def format_fused_table(rows: list[FusedRow]) -> str:
    header = ("batch × d_in → d_out  T×k ", "sketchcore fused", "NumPy unfused", "speedup", "dense layer",
              "speedup", "memory sc/NumPy/dense MiB", "rel.err sc", "rel.err NumPy")
    lines = [" | ".join(header)]
    lines.append("-" * len(lines[0]))
    mib = 2.0**20
    for r in rows:
        b, di, do, t, k = r.shape
        memory = f"{r.sketchcore_bytes / mib:.1f} / {r.numpy_bytes / mib:.1f} / {r.dense_bytes / mib:.1f}"
        lines.append(" | ".join((
            f"{b:>5} × {di:>4} → {do:>4}  {t}×{k:<3}".ljust(len(header[0])),
            f"{r.sketchcore_s * 1e3:8.2f} ms".rjust(len(header[1])),
            f"{r.numpy_s * 1e3:8.2f} ms".rjust(len(header[2])),
            f"{r.numpy_s / r.sketchcore_s:6.2f}×".rjust(len(header[3])),
            f"{r.dense_s * 1e3:8.2f} ms".rjust(len(header[4])),
            f"{r.dense_s / r.sketchcore_s:6.2f}×".rjust(len(header[5])),
            memory.rjust(len(header[6])),
            f"{r.sketchcore_err:.1e}".rjust(len(header[7])),
            f"{r.numpy_err:.1e}".rjust(len(header[8])),
        )))
    return "\n".join(lines)


def format_table(rows: list[Row]) -> str:
    header = ("batch × d_in → d_out  T×k ", "sketchcore (spread)", "NumPy (x@S)@U", "speedup",
              "NumPy x@W", "speedup", "rel.err sc", "rel.err NumPy")
    lines = [" | ".join(header)]
    lines.append("-" * len(lines[0]))
    for r in rows:
        b, di, do, t, k = r.shape
        lines.append(" | ".join((
            f"{b:>5} × {di:>4} → {do:>4}  {t}×{k:<3}".ljust(len(header[0])),
            f"{r.sketchcore_s * 1e3:8.2f} ms ±{50 * r.sketchcore_spread / r.sketchcore_s:3.0f}%".rjust(len(header[1])),
            f"{r.numpy_sketch_s * 1e3:8.2f} ms".rjust(len(header[2])),
            f"{r.numpy_sketch_s / r.sketchcore_s:6.2f}×".rjust(len(header[3])),
            f"{r.numpy_dense_s * 1e3:8.2f} ms".rjust(len(header[4])),
            f"{r.numpy_dense_s / r.sketchcore_s:6.2f}×".rjust(len(header[5])),
            f"{r.sketchcore_err:.1e}".rjust(len(header[6])),
            f"{r.numpy_err:.1e}".rjust(len(header[7])),
        )))
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sketchcore",
        description="Benchmark sketchcore.sketched_matmul against NumPy on this machine (float32). Subcommands: "
                    "info, landscape, memory, convert (python -m sketchcore SUBCOMMAND --help).")
    parser.add_argument("--version", action="version", version=f"sketchcore {sketchcore.__version__}")
    parser.add_argument("--quick", action="store_true", help="small shapes only (a few seconds)")
    parser.add_argument("--repeats", type=int, default=7, help="timed calls per measurement (default 7)")
    parser.add_argument("--budget", type=float, default=1.5,
                        help="seconds per measurement after which timing stops early (default 1.5)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads for sketchcore (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random data")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats: expected an integer ≥ 1, got {args.repeats}")
    if args.threads is not None:
        if args.threads < 1:
            parser.error(f"--threads: expected an integer ≥ 1, got {args.threads}")
        sketchcore.set_num_threads(args.threads)

    info = sketchcore.build_info()
    print(f"sketchcore {info['version']} (BLAS: {info['blas']}, CUDA: {'yes' if info['cuda'] else 'no'}), "
          f"NumPy {np.__version__}, {sketchcore.get_num_threads()} threads", flush=True)
    shapes = QUICK_SHAPES if args.quick else DEFAULT_SHAPES
    rng = np.random.default_rng(args.seed)
    rows: list[Row] = []
    fused_rows: list[FusedRow] = []
    for i, shape in enumerate(shapes, 1):
        b, di, do, t, k = shape
        print(f"[{i}/{len(shapes)}] batch {b}, d_in {di} → d_out {do}, T {t} × k {k} ...", end=" ", flush=True)
        t0 = time.perf_counter()
        fused_rows.append(run_fused(shape, args.repeats, args.budget, rng))
        rows.append(run_shape(shape, args.repeats, args.budget, rng))
        print(f"done in {time.perf_counter() - t0:.1f} s", flush=True)
    print("\nThe fused layer y = relu(scale·(x@S)@U + b) in one call, against the same expression in NumPy and "
          "against the dense layer relu(x@W + b) it replaces:\n")
    print(format_fused_table(fused_rows))
    print("\nmemory = peak bytes one call allocates (its output included): NumPy's arrays traced by tracemalloc, "
          "sketchcore's output plus its pooled temporaries.")
    print("\nThe bare product (x@S)@U, no epilogue: both sides make the same two BLAS calls, so a tie (≈ 1×) is "
          "the expected result here:\n")
    print(format_table(rows))
    print("\nTimes are medians (float32) of calls taken in three rounds that alternate the sides; "
          "spread = ±half the range of sketchcore's timed calls; "
          "speedup = baseline time / sketchcore time; rel.err = ‖y − y₆₄‖/‖y₆₄‖ against a float64 reference.")
    return 0

