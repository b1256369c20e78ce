"""The cost of the memory mode (issue 47, ``low_rank_activations``): forward and backward of the
CoLA model of bench/pretrain.py (row ``cola_sketchcore``) without the mode, in it, and in it with
the cache across unpacks switched off (every saved tensor recomputing its whole recipe tree), timed
side by side: round by round on the same batch and model, in an order rotated every round, so a
change in the machine's load falls on every variant alike. Reports the median seconds, each
variant's per-round ratio to the plain step (median, min, max), and the most bytes of recomputed
values the cache held at once in one backward.

    python bench/memory_mode_cost.py --preset {quick,cpu,gpu} [--rounds 7]
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
import weakref
from pathlib import Path
from typing import Any, Callable

import torch

from sketchcore.torch import low_rank_activations
from sketchcore.torch.ops import _memory_recipes

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pretrain import PRESETS, SEED, _autocast, _sync  # noqa: E402
from pretrain_data import batches, load_corpus  # noqa: E402
from pretrain_models import build  # noqa: E402

VARIANTS = ("plain", "memory", "memory_no_cache")


class CacheMeter:
    """The most bytes of recomputed values the recipes' caches hold at once (while entered):
    sampled after every computation of a value, the only moment the total grows."""

    def __init__(self) -> None:
        self.most = 0
        self._value = _memory_recipes.Recipe.value

    def __enter__(self) -> CacheMeter:
        meter, value = self, self._value
        seen: weakref.WeakSet[_memory_recipes.Recipe] = weakref.WeakSet()

        def counted(recipe: _memory_recipes.Recipe) -> torch.Tensor:
            out = value(recipe)
            seen.add(recipe)
            held = sum(r.cached.untyped_storage().nbytes() for r in seen if r.cached is not None)
            meter.most = max(meter.most, held)
            return out

        _memory_recipes.Recipe.value = counted  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        _memory_recipes.Recipe.value = self._value  # type: ignore[method-assign]


def step(model: torch.nn.Module, batch: torch.Tensor, variant: str) -> float:
    """Seconds of one forward and backward (gradients then dropped) in `variant`."""
    _memory_recipes.CACHE_ACROSS_UNPACKS = variant != "memory_no_cache"
    mode: Callable[[], Any] = contextlib.nullcontext if variant == "plain" else low_rank_activations
    _sync(batch.device)
    start = time.perf_counter()
    with _autocast(batch.device), mode():
        loss = model(input_ids=batch, labels=batch).loss
    loss.backward()
    _sync(batch.device)
    took = time.perf_counter() - start
    model.zero_grad(set_to_none=True)
    _memory_recipes.CACHE_ACROSS_UNPACKS = True
    return took


def measure(preset: dict[str, Any], rounds: int) -> dict[str, Any]:
    """Times the variants side by side (see the module) and meters the cache in one backward."""
    device = torch.device(preset["device"])
    model = build("cola_sketchcore", preset, SEED).to(device)
    corpus = load_corpus(preset["corpus_bytes"])
    batch = batches(corpus.train, preset["batch"], preset["length"], torch.Generator().manual_seed(0)).to(device)
    for variant in VARIANTS:  # warm-up: first calls, allocator, thread pools
        step(model, batch, variant)
    with CacheMeter() as meter:
        step(model, batch, "memory")
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for i in range(rounds):
        for variant in VARIANTS[i % 3:] + VARIANTS[:i % 3]:
            times[variant].append(step(model, batch, variant))
    result: dict[str, Any] = {"cache_peak_mib": meter.most / 2**20, "variants": {}}
    for variant, seconds in times.items():
        ratios = [t / p for t, p in zip(seconds, times["plain"])]
        result["variants"][variant] = {"median_s": statistics.median(seconds), "min_s": min(seconds),
                                       "max_s": max(seconds), "vs_plain_median": statistics.median(ratios),
                                       "vs_plain_min": min(ratios), "vs_plain_max": max(ratios)}
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="quick")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds (each times every variant once)")
    args = parser.parse_args(argv)
    result = measure(PRESETS[args.preset], args.rounds)
    print(f"preset {args.preset}, {args.rounds} rounds, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("| variant | median s | min–max s | × plain (median, per-round min–max) |\n| --- | ---: | ---: | ---: |")
    for variant, r in result["variants"].items():
        print(f"| {variant} | {r['median_s']:.3f} | {r['min_s']:.3f}–{r['max_s']:.3f} | {r['vs_plain_median']:.3f} "
              f"({r['vs_plain_min']:.3f}–{r['vs_plain_max']:.3f}) |")
    print(f"Recomputed values held by the cache at once in one backward: at most {result['cache_peak_mib']:.2f} MiB.")
    return result


if __name__ == "__main__":
    main()
