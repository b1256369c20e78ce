"""Relative weight error of converting a dense layer, against the optimal (Eckart–Young) error,
for three spectra, two sizes and several parameter budgets. Writes a Markdown table and JSON.

    python bench/conversion_table.py bench/results/conversion-DATE   # .md and .json

Budget = learnable parameters of the converted layer / the dense layer's (d × d). At a budget
b: LowRankLinear has rank r = b·d/2; SKLinear (T = 2 terms) has k = b·d/4 per term, i.e. 2·T·k
= b·d singular directions for the same learnable parameters (its fixed factors are buffers).
"""
from __future__ import annotations

import json
import math
import sys
import time
import warnings

import torch

from sketchcore.torch import LowRankLinear, SKLinear

SPECTRA = {"exp": lambda i: torch.exp(-i / 32), "1/sqrt(i)": lambda i: 1 / torch.sqrt(i),
           "flat": lambda i: torch.ones_like(i)}
BUDGETS = (1 / 16, 1 / 8, 1 / 4, 1 / 2)
TERMS = 2


def dense_layer(d: int, spectrum: str, seed: int) -> tuple[torch.nn.Linear, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    s = SPECTRA[spectrum](torch.arange(1, d + 1, dtype=torch.float64))
    U, _ = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=torch.float64))
    linear = torch.nn.Linear(d, d, dtype=torch.float64)
    with torch.no_grad():
        linear.weight.copy_((U * s) @ V.T)
    return linear, s


def error(layer: torch.nn.Module, linear: torch.nn.Linear) -> float:
    return float(torch.linalg.norm(layer.weight - linear.weight) / torch.linalg.norm(linear.weight))


def optimal(s: torch.Tensor, rank: int) -> float:
    return math.sqrt(float((s[rank:] ** 2).sum() / (s**2).sum()))


def main(prefix: str) -> None:
    rows = []
    for d in (512, 1024):
        for spectrum in SPECTRA:
            linear, s = dense_layer(d, spectrum, seed=d)
            for budget in BUDGETS:
                r, k = int(budget * d / 2), int(budget * d / (2 * TERMS))
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    start = time.perf_counter()
                    svd = SKLinear.from_linear(linear, TERMS, k, init="svd")
                    seconds = time.perf_counter() - start
                    panther = SKLinear.from_linear(linear, TERMS, k, init="panther")
                lowrank = LowRankLinear.from_linear(linear, r)
                rows.append({"d": d, "spectrum": spectrum, "budget": budget, "lowrank_rank": r, "sklinear_k": k,
                             "optimal_rank_r": optimal(s, r), "lowrank": error(lowrank, linear),
                             "optimal_rank_2Tk": optimal(s, 2 * TERMS * k), "sklinear_svd": error(svd, linear),
                             "sklinear_panther": error(panther, linear), "sklinear_svd_seconds": seconds})
                print(rows[-1], flush=True)
    lines = ["| d | spectrum | budget | LowRankLinear (r) | optimal rank r | SKLinear svd (T=2, k) | optimal rank 2Tk "
             "| SKLinear panther init |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['d']} | {row['spectrum']} | {row['budget']:.4g} | {row['lowrank']:.4f} "
                     f"(r={row['lowrank_rank']}) | {row['optimal_rank_r']:.4f} | {row['sklinear_svd']:.4f} "
                     f"(k={row['sklinear_k']}) | {row['optimal_rank_2Tk']:.4f} | {row['sklinear_panther']:.3f} |")
    meta = {"command": "python bench/conversion_table.py " + prefix, "date": time.strftime("%Y-%m-%d"),
            "torch": torch.__version__, "dtype": "float64"}
    with open(prefix + ".json", "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    with open(prefix + ".md", "w") as f:
        f.write(f"Relative weight error ‖W_new − W‖_F / ‖W‖_F, {meta}\n\n" + "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "conversion")
