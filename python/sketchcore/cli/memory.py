"""``sketchcore memory``: the memory of one training step of a sketched layer against the dense
layer it replaces, in MiB: learnable parameters, fixed buffers, gradients, Adam's two moments,
input and output activations, the saved intermediate Z = x·S, and the pooled workspace (measured
by running the layer's forward and backward through sketchcore). ``--layer`` says which layer
``--terms``/``--rank`` describe (Panther's SKLinear by default; see ``_layer_kinds``)."""
from __future__ import annotations

import argparse

import numpy as np

import sketchcore
from sketchcore.cli._args import add_layer_shape, positive
from sketchcore.cli._layer_kinds import KINDS, LayerShape, check_kind


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sketchcore memory",
                                description="Memory breakdown of a sketched layer vs the dense one (MiB).")
    add_layer_shape(p, (4096, 1024), (4096, 1024))
    p.add_argument("--layer", choices=KINDS, default="sklinear",
                   help="SKLinear(num_terms=T, low_rank=k) (default), LowRankLinear(rank=k), or the raw operator")
    p.add_argument("--terms", type=positive, default=None, help="num_terms T (default 2; 1 for --layer lowrank)")
    p.add_argument("--rank", type=positive, default=None, help="rank k per term (default 64; quick 32)")
    p.add_argument("--quick", action="store_true", help="small defaults (runs in about a second)")
    return p


def measured_workspace(batch: int, shape: LayerShape, dtype: np.dtype) -> int:
    """Peak bytes of sketchcore's host pool over one forward (saving Z) and the backward of the
    layer's learnable factors."""
    rng = np.random.default_rng(0)
    terms, rank = shape.operator_terms, shape.rank
    x = rng.standard_normal((batch, shape.d_in)).astype(dtype)
    S = rng.standard_normal((terms, shape.d_in, rank)).astype(dtype)
    U = rng.standard_normal((terms, rank, shape.d_out)).astype(dtype)
    b = np.zeros(shape.d_out, dtype)
    Z = np.empty((batch, terms * rank), dtype)
    S_terms, U_terms = shape.learnable_terms()
    sketchcore.memory.reset_peak()
    before = sketchcore.memory.stats()["current_bytes"]
    y = sketchcore.sketched_matmul(x, S, U, bias=b, activation="relu", intermediate=Z, scale=shape.scale)
    sketchcore.sketched_matmul_backward(y, x, S, U, Z, bias=b, activation="relu", scale=shape.scale,
                                        S_terms=S_terms, U_terms=U_terms)
    return int(sketchcore.memory.stats()["peak_bytes"] - before)


def breakdown(batch: int, shape: LayerShape, dtype: str) -> list[tuple[str, int, int]]:
    """(what, dense bytes, sketched bytes) per row."""
    size = np.dtype(dtype).itemsize
    d_in, d_out = shape.d_in, shape.d_out
    dense_params = d_in * d_out + d_out
    learnable = shape.learnable + d_out
    return [
        ("learnable parameters", dense_params * size, learnable * size),
        ("fixed buffers", 0, shape.buffers * size),
        ("gradients", dense_params * size, learnable * size),
        ("Adam state (2 moments)", 2 * dense_params * size, 2 * learnable * size),
        ("input activations x", batch * d_in * size, batch * d_in * size),
        ("output activations y", batch * d_out * size, batch * d_out * size),
        ("saved intermediate Z = x·S", 0, batch * shape.operator_terms * shape.rank * size),
        ("pooled workspace (measured)", 0, measured_workspace(batch, shape, np.dtype(dtype))),
    ]


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    d_in = args.d_in or (1024 if args.quick else 4096)
    d_out = args.d_out or d_in
    batch = args.batch or (1024 if args.quick else 4096)
    terms = args.terms or (1 if args.layer == "lowrank" else 2)
    problem = check_kind(args.layer, [terms])
    if problem:
        parser.error(problem)
    rank = args.rank or (32 if args.quick else 64)
    shape = LayerShape(args.layer, d_in, d_out, terms, rank)
    rows = breakdown(batch, shape, args.dtype)
    mib = 2.0**20
    size = f"rank={rank}" if args.layer == "lowrank" else f"num_terms={terms}, low_rank={rank}"
    print(f"one training step of a {batch} × {d_in} → {d_out} layer ({args.dtype}, Adam): dense nn.Linear vs "
          f"{shape.label}({size}), rank {shape.map_rank}")
    header = f"{'':<30} {'dense MiB':>11} {'sketched MiB':>13} {'ratio':>7}"
    print(header)
    print("-" * len(header))
    for what, dense, sketched in rows:
        ratio = f"{sketched / dense:6.3f}" if dense else "     -"
        print(f"{what:<30} {dense / mib:>11.2f} {sketched / mib:>13.2f} {ratio:>7}")
    total_dense, total_sketched = sum(r[1] for r in rows), sum(r[2] for r in rows)
    print("-" * len(header))
    print(f"{'total':<30} {total_dense / mib:>11.2f} {total_sketched / mib:>13.2f} {total_sketched / total_dense:7.3f}")
    factors = {"sklinear": "learnable S1s (T, in, k), S2s (T, k, out) and bias, fixed U1s (T, k, out), U2s (T, in, k)",
               "lowrank": "learnable S (in, k), U (k, out) and bias",
               "operator": "learnable S (T, in, k), U (T, k, out) and bias"}[args.layer]
    print(f"\nDense: what a framework keeps for nn.Linear (no workspace counted for its GEMM). Sketched: {factors}; "
          f"Z saved by the forward for the backward; sketchcore's pooled temporaries at their peak over the forward "
          f"and the backward of the learnable factors.")
    return 0
