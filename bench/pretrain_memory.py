"""Peak training memory of one bench/pretrain.py row on the CPU, measured in a fresh process.

    python bench/pretrain_memory.py --preset cpu --row cola_sketchcore_memory [--steps 3]

prints ``{"row": ..., "peak_memory_mib": ...}``: the resident set's growth over a few training
steps (model built, AdamW, the row's memory mode) plus the parameters' bytes — parameters,
gradients, the optimizer's moments, the saved activations and the backward's temporaries.

Why a process of its own: in one process that trained other rows before, glibc's heap keeps what
they freed, and the resident set of a later row shows the earlier rows' peaks, not its own (the
first full ``cpu`` run measured the memory mode at 0.86× dense that way, though it keeps 0.45× the
activations). Why ``MALLOC_MMAP_THRESHOLD_``: glibc raises its threshold for mapping a block of
its own (up to 32 MiB) each time it frees a mapped one, so after a few steps the activations
come from the heap, where a freed block stays resident; with a fixed threshold of 128 KiB every
tensor larger than that is mapped and unmapped, and the resident set follows the bytes in use.
The same setting for every row; the steps run slower under it, so nothing here is timed.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

#: glibc's default mapping threshold, fixed (see the module's docstring).
MMAP_THRESHOLD = str(128 * 1024)


def measure(preset_name: str, row: str, steps: int = 3) -> float:
    """The peak training memory (MiB) of `row` under preset `preset_name`, from a fresh process."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": MMAP_THRESHOLD}
    done = subprocess.run([sys.executable, __file__, "--preset", preset_name, "--row", row, "--steps", str(steps)],
                          capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"pretrain_memory: row {row!r} failed:\n{done.stderr[-3000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["peak_memory_mib"])


def _peak_of_training(preset_name: str, row: str, steps: int) -> float:
    import torch

    from sketchcore.torch import low_rank_activations
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from meters import PeakMemory
    from pretrain import PRESETS, SEED, _step, make_optimizer
    from pretrain_data import batches, load_corpus
    from pretrain_models import build

    preset = PRESETS[preset_name]
    corpus = load_corpus(preset["corpus_bytes"])
    generator = torch.Generator().manual_seed(SEED)
    model = build(row, preset, SEED)
    optimizer = make_optimizer(model, preset["lr"])
    memory_mode = low_rank_activations if row.endswith("_memory") else contextlib.nullcontext
    meter = PeakMemory(torch.device("cpu"))
    meter.start(model)
    for _ in range(steps):  # the optimizer's moments exist from the first step on
        _step(model, optimizer, batches(corpus.train, preset["batch"], preset["length"], generator), preset["lr"],
              memory_mode)
    return meter.peak()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", required=True)
    parser.add_argument("--row", required=True)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps: expected at least 1, got {args.steps}")
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") != MMAP_THRESHOLD:
        parser.error(f"MALLOC_MMAP_THRESHOLD_: expected {MMAP_THRESHOLD} (run through measure()), "
                     f"got {os.environ.get('MALLOC_MMAP_THRESHOLD_')!r}")
    print(json.dumps({"row": args.row, "peak_memory_mib": _peak_of_training(args.preset, args.row, args.steps)}))


if __name__ == "__main__":
    main()
