"""``sketchcore landscape``: sweep num_terms × rank for one layer and measure, per configuration,
learnable parameters and fixed buffers, forward (and backward) median time with its spread, peak
pool memory, FLOPs and the approximation error of converting a reference dense layer; print a
table, write JSON/CSV, and draw the seeds' four panels (plus error vs parameters) with
matplotlib. ``--layer`` chooses the layer the sweep describes (see ``_layer_kinds``): Panther's
SKLinear by default, LowRankLinear, or the raw operator."""
from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import time
from typing import Any, Callable

import numpy as np

import sketchcore
from sketchcore.cli._args import add_layer_shape, positive
from sketchcore.cli._layer_kinds import KINDS, LayerShape, check_kind
from sketchcore._progress import Progress

SPECTRA: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp": lambda i: np.exp(-i / 32), "sqrt": lambda i: 1 / np.sqrt(i), "flat": lambda i: np.ones_like(i)}
PLOT_HINT = "--plot needs matplotlib: pip install 'sketchcore[plot]' (or pip install matplotlib)"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sketchcore landscape",
                                description="Sweep num_terms × rank for one sketched layer (see module docs).")
    add_layer_shape(p, (1024, 256), (1024, 256))
    p.add_argument("--layer", choices=KINDS, default="sklinear",
                   help="what --terms and --ranks describe: SKLinear(num_terms=T, low_rank=k), 2T products with T "
                        "learnable (default); LowRankLinear(rank=k); or the raw operator, T learnable terms")
    p.add_argument("--terms", type=positive, nargs="+", default=None,
                   help="num_terms values (default 1 2 4 8; 1 for --layer lowrank)")
    p.add_argument("--ranks", type=positive, nargs="+", default=None, help="rank values, k (default 8 16 32 64)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--backward", action="store_true", help="also time the backward")
    p.add_argument("--spectrum", choices=sorted(SPECTRA), default="sqrt",
                   help="singular values of the reference dense layer whose conversion error is reported")
    p.add_argument("--repeats", type=positive, default=5, help="timed calls per measurement (median)")
    p.add_argument("--quick", action="store_true", help="a small sweep (256 features, 3 × 3 configurations)")
    p.add_argument("--json", metavar="FILE", help="write one record per configuration")
    p.add_argument("--csv", metavar="FILE", help="write one row per configuration")
    p.add_argument("--plot", metavar="FILE.png", help="draw the landscape (needs matplotlib)")
    p.add_argument("--seed", type=int, default=0)
    return p


class _Arrays:
    """Random arrays, timing and pool statistics on the chosen device."""

    def __init__(self, device: str, dtype: str, seed: int) -> None:
        self.device, self.rng = device, np.random.default_rng(seed)
        self.dtype = np.dtype(dtype)
        if device == "cuda":
            try:
                import torch
            except ImportError:
                raise SystemExit("landscape: --device cuda needs PyTorch with CUDA") from None
            if sketchcore.cuda_device_count() == 0 or not torch.cuda.is_available():
                raise SystemExit("landscape: --device cuda: no CUDA device (or sketchcore built without CUDA)")
            self.torch = torch

    def randn(self, *shape: int, scale: float = 1.0) -> Any:
        a = (self.rng.standard_normal(shape) * scale).astype(self.dtype)
        return self.torch.from_numpy(a).cuda() if self.device == "cuda" else a

    def sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def reset_peak(self) -> None:
        sketchcore.memory.reset_peak()
        if self.device == "cuda":
            sketchcore.memory.device_reset_peak(0)

    def peak(self) -> int:
        stats = sketchcore.memory.device_stats(0) if self.device == "cuda" else sketchcore.memory.stats()
        return int(stats["peak_bytes"])

    def time(self, fn: Callable[[], Any], repeats: int) -> tuple[float, float]:
        """Median and spread (max − min) of `repeats` calls after a warm-up of at least two calls
        and 0.2 s (another library's BLAS threads may still be spinning from the previous
        measurement and steal the cores for a moment)."""
        start, warm = time.perf_counter(), 0
        while warm < 2 or time.perf_counter() - start < 0.2:
            fn()
            warm += 1
        self.sync()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            self.sync()
            times.append(time.perf_counter() - start)
        return statistics.median(times), max(times) - min(times)


def conversion_errors(d_in: int, d_out: int, spectrum: str, ranks: list[int], seed: int) -> dict[int, float]:
    """Relative error of the best rank-r factors (truncated SVD: what LowRankLinear.from_linear
    builds, and SKLinear.from_linear(init="svd") at r = 2Tk) of a reference dense layer with the
    given spectrum, measured on the factors."""
    rng = np.random.default_rng(seed + 1)
    d = min(d_in, d_out)
    s = SPECTRA[spectrum](np.arange(1, d + 1, dtype=np.float64))
    Uo, _ = np.linalg.qr(rng.standard_normal((d_in, d)))
    Vo, _ = np.linalg.qr(rng.standard_normal((d_out, d)))
    M = (Uo * s) @ Vo.T
    U, sv, Vt = np.linalg.svd(M, full_matrices=False)
    norm = np.linalg.norm(M)
    errors = {}
    for r in sorted(set(ranks)):
        r_eff = min(r, d)
        A, B = U[:, :r_eff] * np.sqrt(sv[:r_eff]), np.sqrt(sv[:r_eff])[:, None] * Vt[:r_eff]
        errors[r] = float(np.linalg.norm(A @ B - M) / norm)
    return errors


def sweep(args: argparse.Namespace) -> list[dict[str, Any]]:
    arrays = _Arrays(args.device, args.dtype, args.seed)
    d_in, d_out, batch = args.d_in, args.d_out, args.batch
    x = arrays.randn(batch, d_in)
    W = arrays.randn(d_in, d_out, scale=d_in ** -0.5)
    shapes = [LayerShape(args.layer, d_in, d_out, t, k) for t in args.terms for k in args.ranks]
    errors = conversion_errors(d_in, d_out, args.spectrum, [s.map_rank for s in shapes], args.seed)
    progress = Progress(len(shapes) + 1, "landscape")
    dense_s, dense_spread = arrays.time(lambda: x @ W, args.repeats)
    records = [{"layer": "dense", "num_terms": 0, "rank": 0, "params": d_in * d_out, "buffers": 0,
                "map_rank": min(d_in, d_out), "flops": 2 * batch * d_in * d_out, "forward_s": dense_s,
                "forward_spread_s": dense_spread, "backward_s": None, "backward_spread_s": None,
                "peak_pool_bytes": 0, "error": 0.0}]
    progress.step("dense")
    for shape in shapes:
        terms, rank = shape.operator_terms, shape.rank
        S = arrays.randn(terms, d_in, rank, scale=d_in ** -0.5)
        U = arrays.randn(terms, rank, d_out, scale=rank ** -0.5)
        Z = arrays.randn(batch, terms * rank)
        forward = lambda: sketchcore.sketched_matmul(x, S, U, scale=shape.scale)  # noqa: E731
        forward_s, forward_spread = arrays.time(forward, args.repeats)
        backward_s = backward_spread = None
        arrays.reset_peak()
        y = sketchcore.sketched_matmul(x, S, U, intermediate=Z, scale=shape.scale)
        if args.backward:  # the gradients a training step of this layer computes
            S_terms, U_terms = shape.learnable_terms()
            backward = lambda: sketchcore.sketched_matmul_backward(  # noqa: E731
                y, x, S, U, Z, scale=shape.scale, S_terms=S_terms, U_terms=U_terms)
            backward_s, backward_spread = arrays.time(backward, args.repeats)
        arrays.sync()
        records.append({"layer": shape.label, "num_terms": shape.terms, "rank": rank, "params": shape.learnable,
                        "buffers": shape.buffers, "map_rank": shape.map_rank, "flops": batch * shape.flops_per_row,
                        "forward_s": forward_s, "forward_spread_s": forward_spread, "backward_s": backward_s,
                        "backward_spread_s": backward_spread, "peak_pool_bytes": arrays.peak(),
                        "error": errors[shape.map_rank]})
        progress.step(f"T={shape.terms} k={rank}")
    return records


def format_table(records: list[dict[str, Any]], backward: bool) -> str:
    header = (f"{'layer':<13} {'T':>3} {'k':>5} {'learnable':>11} {'buffers':>9} {'rank':>5} {'GFLOP':>8} "
              f"{'forward ms (spread)':>21}")
    header += f" {'backward ms':>12}" if backward else ""
    header += f" {'pool MiB':>9} {'rel. error':>10}"
    lines = [header, "-" * len(header)]
    for r in records:
        line = (f"{r['layer']:<13} {r['num_terms']:>3} {r['rank']:>5} {r['params']:>11,} {r['buffers']:>9,} "
                f"{r['map_rank']:>5} {r['flops'] / 1e9:>8.3f} "
                f"{r['forward_s'] * 1e3:>10.3f} (±{r['forward_spread_s'] * 5e2:6.3f})")
        if backward:
            line += f" {r['backward_s'] * 1e3:>12.3f}" if r["backward_s"] is not None else f" {'-':>12}"
        line += f" {r['peak_pool_bytes'] / 2**20:>9.2f} {r['error']:>10.4f}"
        lines.append(line)
    return "\n".join(lines)


def plot(records: list[dict[str, Any]], path: str, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sketched = [r for r in records if r["layer"] != "dense"]
    dense = next(r for r in records if r["layer"] == "dense")
    terms = sorted({r["num_terms"] for r in sketched})
    ranks = sorted({r["rank"] for r in sketched})
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    (a_time, a_mem, a_err), (a_terms, a_ranks, a_note) = axes

    def by(key: str, value: int) -> list[dict[str, Any]]:
        return sorted((r for r in sketched if r[key] == value), key=lambda r: r["params"])

    for k in ranks:
        rows = by("rank", k)
        a_time.plot([r["params"] for r in rows], [r["forward_s"] * 1e3 for r in rows], "o-", label=f"k={k}")
        a_mem.plot([r["params"] for r in rows], [r["peak_pool_bytes"] / 2**20 for r in rows], "o-", label=f"k={k}")
        a_terms.plot([r["num_terms"] for r in rows], [r["forward_s"] * 1e3 for r in rows], "o-", label=f"k={k}")
    for t in terms:
        rows = sorted(by("num_terms", t), key=lambda r: r["rank"])
        a_ranks.plot([r["rank"] for r in rows], [r["forward_s"] * 1e3 for r in rows], "o-", label=f"T={t}")
    a_err.plot([r["params"] for r in sorted(sketched, key=lambda r: r["params"])],
               [r["error"] for r in sorted(sketched, key=lambda r: r["params"])], "o", color="tab:red")
    for axis in (a_time, a_terms, a_ranks):
        axis.axhline(dense["forward_s"] * 1e3, color="gray", linestyle="--", label="dense x@W")
    for axis, xlabel, ylabel, name in (
            (a_time, "learnable parameters", "forward time (ms)", "time vs parameters"),
            (a_mem, "learnable parameters", "peak pool memory (MiB)", "memory vs parameters"),
            (a_err, "learnable parameters", "relative weight error", "conversion error vs parameters"),
            (a_terms, "num_terms", "forward time (ms)", "time vs num_terms, per rank"),
            (a_ranks, "rank k", "forward time (ms)", "time vs rank, per num_terms")):
        axis.set_xlabel(xlabel)
        axis.set_ylabel(ylabel)
        axis.set_title(name)
        axis.grid(True, alpha=0.3)
        if axis is not a_err:
            axis.legend(fontsize=8)
    a_note.axis("off")
    a_note.text(0.0, 0.5, title, fontsize=10, va="center", family="monospace")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    quick = args.quick
    args.d_in = args.d_in or (256 if quick else 1024)
    args.d_out = args.d_out or args.d_in
    args.batch = args.batch or (256 if quick else 1024)
    if args.layer == "lowrank" and args.terms is None:
        args.terms = [1]
    args.terms = args.terms or ([1, 2, 4] if quick else [1, 2, 4, 8])
    problem = check_kind(args.layer, args.terms)
    if problem:
        parser.error(problem)
    args.ranks = args.ranks or ([8, 16, 32] if quick else [8, 16, 32, 64])
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print(PLOT_HINT, file=sys.stderr)
            return 2
    records = sweep(args)
    print(format_table(records, args.backward))
    what = {"sklinear": "SKLinear(num_terms=T, low_rank=k): 2T products of rank k, T learnable (S1s, S2s) and T "
                        "fixed (buffers U1s, U2s), rank up to 2Tk",
            "lowrank": "LowRankLinear(rank=k): x S U, all learnable",
            "operator": "the raw operator sketched_matmul(x, S, U): T learnable terms of rank k"}[args.layer]
    print(f"\n{args.batch} × {args.d_in} → {args.d_out}, {args.dtype} on {args.device}, "
          f"{sketchcore.get_num_threads()} threads; layer = {what}. Times are medians of {args.repeats} calls, "
          f"spread = ±half their range; learnable = trained entries, buffers = fixed ones; error = ‖W_r − W‖/‖W‖ "
          f"of the best approximation of the layer's rank (svd initialisation) of a reference layer "
          f"({args.spectrum} spectrum).")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": {k: v for k, v in vars(args).items() if k not in ("json", "csv", "plot")},
                       "records": records}, f, indent=1)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(records[0]))
            writer.writeheader()
            writer.writerows(records)
    if args.plot:
        title = (f"sketchcore landscape: {args.layer}\n{args.batch} × {args.d_in} → {args.d_out}\n{args.dtype}, {args.device}, "
                 f"{sketchcore.get_num_threads()} threads\nsketchcore {sketchcore.__version__}\n"
                 f"reference spectrum: {args.spectrum}")
        plot(records, args.plot, title)
        print(f"plot written to {args.plot}")
    return 0
