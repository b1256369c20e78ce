"""``sketchcore memory``: the memory of one training step of a sketched layer against the dense
layer it replaces, in MiB: parameters, gradients, Adam's two moments, input and output
activations, the saved intermediate Z = x·S, and the pooled workspace (measured by running a
forward and a backward through sketchcore)."""
from __future__ import annotations

import argparse

import numpy as np

import sketchcore
from sketchcore.cli._args import add_layer_shape, positive


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sketchcore memory",
                                description="Memory breakdown of a sketched layer vs the dense one (MiB).")
    add_layer_shape(p, (4096, 1024), (4096, 1024))
    p.add_argument("--terms", type=positive, default=None, help="num_terms T (default 2)")
    p.add_argument("--rank", type=positive, default=None, help="rank k per term (default 64; quick 32)")
    p.add_argument("--quick", action="store_true", help="small defaults (runs in about a second)")
    return p


def measured_workspace(batch: int, d_in: int, d_out: int, terms: int, rank: int, dtype: np.dtype) -> int:
    """Peak bytes of sketchcore's host pool over one forward (saving Z) and one full backward."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, d_in)).astype(dtype)
    S = rng.standard_normal((terms, d_in, rank)).astype(dtype)
    U = rng.standard_normal((terms, rank, d_out)).astype(dtype)
    b = np.zeros(d_out, dtype)
    Z = np.empty((batch, terms * rank), dtype)
    sketchcore.memory.reset_peak()
    before = sketchcore.memory.stats()["current_bytes"]
    y = sketchcore.sketched_matmul(x, S, U, bias=b, activation="relu", intermediate=Z)
    sketchcore.sketched_matmul_backward(y, x, S, U, Z, bias=b, activation="relu")
    return int(sketchcore.memory.stats()["peak_bytes"] - before)


def breakdown(batch: int, d_in: int, d_out: int, terms: int, rank: int, dtype: str) -> list[tuple[str, int, int]]:
    """(what, dense bytes, sketched bytes) per row."""
    size = np.dtype(dtype).itemsize
    dense_params = d_in * d_out + d_out
    sketched_params = terms * rank * (d_in + d_out) + d_out
    return [
        ("parameters", dense_params * size, sketched_params * size),
        ("gradients", dense_params * size, sketched_params * size),
        ("Adam state (2 moments)", 2 * dense_params * size, 2 * sketched_params * size),
        ("input activations x", batch * d_in * size, batch * d_in * size),
        ("output activations y", batch * d_out * size, batch * d_out * size),
        ("saved intermediate Z = x·S", 0, batch * terms * rank * size),
        ("pooled workspace (measured)", 0, measured_workspace(batch, d_in, d_out, terms, rank, np.dtype(dtype))),
    ]


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    d_in = args.d_in or (1024 if args.quick else 4096)
    d_out = args.d_out or d_in
    batch = args.batch or (1024 if args.quick else 4096)
    terms = args.terms or 2
    rank = args.rank or (32 if args.quick else 64)
    rows = breakdown(batch, d_in, d_out, terms, rank, args.dtype)
    mib = 2.0**20
    print(f"one training step of a {batch} × {d_in} → {d_out} layer ({args.dtype}, Adam): dense vs sketched "
          f"T={terms} × k={rank}")
    header = f"{'':<30} {'dense MiB':>11} {'sketched MiB':>13} {'ratio':>7}"
    print(header)
    print("-" * len(header))
    for what, dense, sketched in rows:
        ratio = f"{sketched / dense:6.3f}" if dense else "     -"
        print(f"{what:<30} {dense / mib:>11.2f} {sketched / mib:>13.2f} {ratio:>7}")
    total_dense, total_sketched = sum(r[1] for r in rows), sum(r[2] for r in rows)
    print("-" * len(header))
    print(f"{'total':<30} {total_dense / mib:>11.2f} {total_sketched / mib:>13.2f} {total_sketched / total_dense:7.3f}")
    print("\nDense: what a framework keeps for nn.Linear (no workspace counted for its GEMM). Sketched: the factors "
          "S (T, in, k), U (T, k, out) and bias, Z saved by the forward for the backward, and sketchcore's pooled "
          "temporaries at their peak over the forward and backward.")
    return 0
