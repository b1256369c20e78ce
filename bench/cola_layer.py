"""One CoLA layer, fused against its plain-torch composition (issue 47's op target).

    python bench/cola_layer.py [--rows 4096] [--d 1024] [--rank 256] [--rounds 15] [--out PREFIX]

Forward + backward of ``y = σ(x A) B + b`` (σ = SiLU, x requiring gradient as inside a model):
sketchcore's ``sketched_linear(x, A, B, b, inner_activation="silu")`` (σ fused into the first
product, only the pre-activation x·A saved) against ``torch.addmm(b, silu(x @ A), B)`` (what two
``nn.Linear`` and a SiLU run). The two run interleaved, round by round, on the same data; the
ratio is the peer's time over the fused one's per round (median, min, max). Also: the bytes each
saves for its backward (counted through ``torch.autograd.graph.saved_tensors_hooks``, one count
per storage), and the gradients of both against a float64 evaluation of the formula.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

import sketchcore.torch as sct


def fused(x: torch.Tensor, A: torch.Tensor, B: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return sct.sketched_linear(x, A, B, b, inner_activation="silu")


def peer(x: torch.Tensor, A: torch.Tensor, B: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.addmm(b, F.silu(x @ A), B)


def saved_bytes(layer: Callable[..., torch.Tensor], tensors: tuple[torch.Tensor, ...]) -> dict[str, int]:
    """Bytes autograd keeps for the backward: all of them, and those other than the input and
    the parameters (the activations the layer itself adds)."""
    seen: dict[int, int] = {}
    own = {t.untyped_storage().data_ptr() for t in tensors}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = layer(*tensors)
    del y
    return {"all": sum(seen.values()), "activations": sum(n for p, n in seen.items() if p not in own)}


def step(layer: Callable[..., torch.Tensor], tensors: tuple[torch.Tensor, ...], grad: torch.Tensor) -> float:
    for t in tensors:
        t.grad = None
    start = time.perf_counter()
    layer(*tensors).backward(grad)
    return time.perf_counter() - start


def gradient_errors(tensors: tuple[torch.Tensor, ...], grad: torch.Tensor) -> dict[str, float]:
    """Relative error of each implementation's gradients against the float64 formula."""
    wide = tuple(t.detach().double().requires_grad_() for t in tensors)
    peer(*wide).backward(grad.double())
    errors = {}
    for name, layer in (("fused", fused), ("peer", peer)):
        step(layer, tensors, grad)
        errors[name] = max(float((t.grad.double() - w.grad).norm() / w.grad.norm()) for t, w in zip(tensors, wide))
    return errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--d", type=int, default=1024)
    parser.add_argument("--rank", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out", type=Path, default=None, help="write PREFIX.json")
    args = parser.parse_args()
    torch.manual_seed(0)
    d, r = args.d, args.rank
    x = torch.randn(args.rows, d, requires_grad=True)
    A = (torch.randn(d, r) / d**0.5).requires_grad_()
    B = (torch.randn(r, d) / r**0.5).requires_grad_()
    b = torch.zeros(d, requires_grad=True)
    tensors = (x, A, B, b)
    grad = torch.randn(args.rows, d)
    errors = gradient_errors(tensors, grad)
    for _ in range(3):  # warm-up: pools, thread pools, first-call costs
        step(fused, tensors, grad)
        step(peer, tensors, grad)
    times: dict[str, list[float]] = {"fused": [], "peer": []}
    for i in range(args.rounds):
        order = (("fused", fused), ("peer", peer)) if i % 2 == 0 else (("peer", peer), ("fused", fused))
        for name, layer in order:
            times[name].append(step(layer, tensors, grad))
    ratios = [p / f for p, f in zip(times["peer"], times["fused"])]
    result = {
        "shape": {"rows": args.rows, "d_in": d, "d_out": d, "rank": r, "dtype": "float32", "inner": "silu"},
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(), "threads": torch.get_num_threads(),
        "load_average": list(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else None,
        "median_ms": {k: 1e3 * statistics.median(v) for k, v in times.items()},
        "ratio_peer_over_fused": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)},
        "saved_bytes": {"fused": saved_bytes(fused, tensors), "peer": saved_bytes(peer, tensors)},
        "gradient_relative_error_vs_float64": errors,
        "rounds": args.rounds,
    }
    print(json.dumps(result, indent=2))
    if args.out is not None:
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
