"""Time to quality of low-rank pretraining (issue 47): a LLaMA-style model trained from scratch on
real text, dense against CoLA (sketchcore's fused layers and the same model in plain torch),
plain low rank and Panther's SKLinear.

    python bench/pretrain.py --preset {quick,cpu,gpu} [--rows dense,cola_sketchcore,...]
                             [--lr 3e-3 ...] [--warmup 0.1 ...] [--init-gain 1 ...]
                             [--out bench/results/PREFIX]
    python bench/pretrain.py --preset cpu --saved-only   # saved activations only (exact; seconds)

Text: the Python standard library's sources as bytes (bench/pretrain_data.py; the files, their
size and a SHA-256 go into the results). Models: bench/pretrain_models.py. Every row starts from
the same seed and sees the same batches.

Per row: training tokens/s (the median of training steps timed side by side with the other rows,
round by round in balanced orders, after training, so that the machine's load changes every row
alike; the ratios to dense per round: median, min, max), peak training memory (on the CPU in a
fresh process per row, bench/pretrain_memory.py), the validation loss at equal tokens (every row
trains ``steps`` steps) and at equal wall-clock (dense trains again with as many steps as fit in
the row's training time, at dense's measured step time, its schedule fitted to them, as CoLA's
paper compares), the loss-versus-time curve (a PNG), and the ratios to dense (and CoLA through
sketchcore against its plain-torch peer). The recipe: AdamW (fused; β = 0.9, 0.95, no weight decay),
linear warm-up over 10 % of the steps, cosine decay to 10 % of the peak learning rate, gradient
clipping at 1, the low-rank factors drawn as ``sketch_model(init="random")`` draws them. The recipe's
sensitivity: ``--lr``, ``--warmup`` (the warm-up's share of the steps) and ``--init-gain`` (the
low-rank factors' product scaled by it at initialisation: each factor by its square root; dense and
SKLinear rows unchanged) take several values each and repeat the rows for every combination. A row in
the preset's ``row_steps`` trains only that many steps (the memory mode: its gradients are those
of ``cola_sketchcore``, tests/torch_adapters; it is here for its speed and memory).
"""
from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import platform
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from sketchcore.torch import low_rank_activations

sys.path.insert(0, str(Path(__file__).resolve().parent))
from meters import PeakMemory, balanced_orders  # noqa: E402
from pretrain_data import batches, load_corpus, validation_batches  # noqa: E402
from pretrain_memory import measure as measure_peak_memory  # noqa: E402
from pretrain_models import INIT_GAIN, ROWS, WARMUP, build, learnable_parameters  # noqa: E402
from pretrain_saved import kept_storages, largest, saved_activation_bytes  # noqa: E402

PRESETS: dict[str, dict[str, Any]] = {
    # CI: seconds.
    "quick": {"hidden": 64, "intermediate": 176, "layers": 1, "heads": 4, "length": 32, "batch": 4, "steps": 4,
              "eval_every": 2, "val_batches": 1, "corpus_bytes": 1_000_000, "lr": 3e-3, "device": "cpu",
              "timing_rounds": 2},
    # Issue 47's CPU preset: hidden 384, 4 layers, rank 96 = d/4, 16 × 128 tokens a step, 489 steps (the
    # fewest with >= 1M tokens: 1,001,472 per row).
    "cpu": {"hidden": 384, "intermediate": 1024, "layers": 4, "heads": 6, "length": 128, "batch": 16, "steps": 489,
            "eval_every": 82, "val_batches": 8, "corpus_bytes": 8_000_000, "lr": 3e-3, "device": "cpu",
            "timing_rounds": 18,  # three times each of the six rows' balanced orders
            # Within the preset's 30 minutes: dense trains again only in the time of the row the
            # equal-time target is about, and the memory mode (the same gradients) trains 30 steps.
            "equal_time_rows": ["cola_sketchcore"], "row_steps": {"cola_sketchcore_memory": 30}},
    # A lent GPU: bfloat16 autocast, hidden 768, 12 layers, 32 × 512 tokens a step, 400 steps: 6.6M tokens
    # per row, under one pass over the standard library's ~8 MB of sources (corpus_bytes takes them all).
    # Sized to one device command (the device tool allows 600 s a command and 15 minutes a session;
    # bench/gpu/run.sh's pretrain step): 3,000 steps, as first planned, would have taken about 15
    # minutes on an H100 at an assumed 50 ms a step, and repeated the text six times. --steps
    # trains longer on a GPU of your own.
    "gpu": {"hidden": 768, "intermediate": 2048, "layers": 12, "heads": 12, "length": 512, "batch": 32,
            "steps": 400, "eval_every": 50, "val_batches": 8, "corpus_bytes": 16_000_000, "lr": 3e-3,
            "device": "cuda", "timing_rounds": 10, "autocast": "bfloat16",
            "equal_time_rows": ["cola_sketchcore"], "row_steps": {"cola_sketchcore_memory": 30}},
}
SEED = 1234


def learning_rate(step: int, steps: int, peak: float, warmup_share: float = WARMUP) -> float:
    """Linear warm-up over `warmup_share` of the steps (none at 0), then cosine to 10 % of the peak."""
    warmup = int(steps * warmup_share + 1e-9)  # steps // 10 at the default share
    if warmup_share > 0:
        warmup = max(1, warmup)
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def make_optimizer(model: torch.nn.Module, lr: float) -> torch.optim.Optimizer:
    """The recipe's optimizer, the same for every row: AdamW (β = 0.9, 0.95, no weight decay) in
    torch's fused implementation: the same arithmetic in one pass over all parameters, about a
    third of the per-tensor loop's time on this CPU (bench/results/cpu-pretrain-optimizer-2026-11-28.md)."""
    return torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0, fused=True)


def _autocast(device: torch.device) -> Any:
    """Training's autocast region: bfloat16 on a GPU (the gpu preset's "autocast"), none on the CPU."""
    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else torch.autocast("cpu",
                                                                                                     enabled=False)


@torch.no_grad()
def validation_loss(model: torch.nn.Module, held_out: list[torch.Tensor], device: torch.device) -> float:
    model.eval()
    with _autocast(device):
        losses = [model(input_ids=b.to(device), labels=b.to(device)).loss.item() for b in held_out]
    model.train()
    return sum(losses) / len(losses)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train(row: str, preset: dict[str, Any], steps: int, lr: float, corpus: Any, held_out: list[torch.Tensor],
          eval_every: int) -> dict[str, Any]:
    """Trains one row for `steps` steps: its curve (step, tokens, training seconds, validation
    loss), tokens/s (the first step, with its one-time costs, left out) and, on a GPU, peak
    memory (on the CPU ``run`` measures it in a process of its own)."""
    device = torch.device(preset["device"])
    model = build(row, preset, SEED, preset.get("init_gain", INIT_GAIN)).to(device)
    optimizer = make_optimizer(model, lr)
    generator = torch.Generator().manual_seed(SEED)
    memory_mode = low_rank_activations if row.endswith("_memory") else contextlib.nullcontext
    tokens_per_step = preset["batch"] * preset["length"]
    activation_bytes = saved_activation_bytes(model, batches(corpus.train, preset["batch"], preset["length"],
                                                            torch.Generator().manual_seed(0)).to(device),
                                              row.endswith("_memory"), preset.get("autocast"))
    meter = PeakMemory(device) if device.type == "cuda" else None
    if meter is not None:
        meter.start(model)
    curve = [{"step": 0, "tokens": 0, "seconds": 0.0, "val_loss": validation_loss(model, held_out, device)}]
    elapsed, first_step = 0.0, 0.0
    for step in range(steps):
        batch = batches(corpus.train, preset["batch"], preset["length"], generator).to(device)
        took, loss = _step(model, optimizer, batch, learning_rate(step, steps, lr, preset.get("warmup", WARMUP)),
                           memory_mode)
        elapsed += took
        if step == 0:
            first_step = took
        if (step + 1) % eval_every == 0 or step + 1 == steps:
            curve.append({"step": step + 1, "tokens": (step + 1) * tokens_per_step, "seconds": elapsed,
                          "val_loss": validation_loss(model, held_out, device), "train_loss": loss.item()})
    timed_steps = max(1, steps - 1)
    return {"row": row, "lr": lr, "warmup": preset.get("warmup", WARMUP),
            "init_gain": preset.get("init_gain", INIT_GAIN), "steps": steps, "params": learnable_parameters(model),
            "tokens_per_s": timed_steps * tokens_per_step / max(elapsed - first_step, 1e-9),
            "step_seconds": (elapsed - first_step) / timed_steps, "train_seconds": elapsed,
            "peak_memory_mib": meter.peak() if meter is not None else None,
            "saved_activations_mib": activation_bytes / 2**20,
            "final_val_loss": curve[-1]["val_loss"], "curve": curve, "_state": (model, optimizer, memory_mode)}


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: torch.Tensor, lr: float,
          memory_mode: Any) -> tuple[float, torch.Tensor]:
    """One timed training step: (seconds, loss)."""
    device = batch.device
    for group in optimizer.param_groups:
        group["lr"] = lr
    _sync(device)
    start = time.perf_counter()
    with _autocast(device), memory_mode():
        loss = model(input_ids=batch, labels=batch).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    _sync(device)
    return time.perf_counter() - start, loss


def interleaved_throughput(results: dict[str, dict[str, Any]], preset: dict[str, Any], corpus: Any) -> None:
    """Times training steps of the trained rows side by side: round by round, one step of each row
    on the same batch, so that a change in the machine's load shows in every row alike (rows
    trained one after the other do not share it). The rounds cycle through balanced orders: a
    step's time can depend on the step before it (the CPU's caches, the allocator's state after a
    larger model), and in a rotated order every row would always follow the same row (the fused
    CoLA row dense, its peer the fused row). Sets each row's tokens/s from its median step and the
    per-round ratios to dense (median, min, max)."""
    generator = torch.Generator().manual_seed(SEED + 7)
    rows = list(results)
    orders = balanced_orders(len(rows))
    times: dict[str, list[float]] = {row: [] for row in rows}
    for i in range(preset["timing_rounds"]):
        batch = batches(corpus.train, preset["batch"], preset["length"], generator).to(preset["device"])
        for row in (rows[j] for j in orders[i % len(orders)]):
            model, optimizer, memory_mode = results[row]["_state"]
            times[row].append(_step(model, optimizer, batch, 1e-5, memory_mode)[0])
    tokens_per_step = preset["batch"] * preset["length"]
    for row in rows:
        r = results[row]
        r["sequential_tokens_per_s"] = r["tokens_per_s"]
        r["step_seconds"] = statistics.median(times[row])
        r["tokens_per_s"] = tokens_per_step / r["step_seconds"]
        r["interleaved_step_seconds"] = times[row]
        if "dense" in times:
            per_round = [d / t for d, t in zip(times["dense"], times[row])]
            r["tokens_per_s_vs_dense_rounds"] = {"median": statistics.median(per_round), "min": min(per_round),
                                                 "max": max(per_round)}


def run(preset_name: str, rows: list[str], lrs: list[float], equal_time_rows: list[str],
        warmups: tuple[float, ...] = (WARMUP,), init_gains: tuple[float, ...] = (INIT_GAIN,)) -> dict[str, Any]:
    base = PRESETS[preset_name]
    corpus = load_corpus(base["corpus_bytes"])
    held_out = validation_batches(corpus.validation, base["batch"], base["length"], base["val_batches"])
    results: dict[str, Any] = {"preset": preset_name, "config": base, "corpus": corpus.description,
                               "machine": _machine(base["device"]), "torch": torch.__version__,
                               "threads": torch.get_num_threads(), "runs": []}
    row_steps = {row: min(base.get("row_steps", {}).get(row, base["steps"]), base["steps"]) for row in rows}
    for lr, warmup, init_gain in itertools.product(lrs, warmups, init_gains):
        preset = {**base, "warmup": warmup, "init_gain": init_gain}
        tokens = {row: train(row, preset, row_steps[row], lr, corpus, held_out,
                             min(preset["eval_every"], row_steps[row])) for row in rows}
        interleaved_throughput(tokens, preset, corpus)
        entry: dict[str, Any] = {"lr": lr, "warmup": warmup, "init_gain": init_gain, "equal_tokens": tokens,
                                 "equal_time": {}}
        if "dense" in tokens:
            for row in rows:  # dense in the row's time (the row's full-length run at its own step time)
                if row == "dense" or row not in equal_time_rows or row_steps[row] != preset["steps"]:
                    continue
                budget = tokens[row]["step_seconds"] * preset["steps"]
                steps = max(1, round(budget / tokens["dense"]["step_seconds"]))
                entry["equal_time"][row] = train("dense", preset, steps, lr, corpus, held_out, max(1, steps // 10))
                entry["equal_time"][row].pop("_state")
        for r in tokens.values():
            r.pop("_state")
        entry["ratios"] = ratios(entry)
        results["runs"].append(entry)
    if base["device"] == "cpu":  # the same for every recipe: measured once per row, two processes at a time
        with ThreadPoolExecutor(max_workers=2) as pool:  # (memory, not time: running side by side changes nothing)
            peaks = dict(zip(rows, pool.map(lambda row: measure_peak_memory(preset_name, row), rows)))
        for entry in results["runs"]:
            for row, r in entry["equal_tokens"].items():
                r["peak_memory_mib"] = peaks[row]
            entry["ratios"] = ratios(entry)
    return results


def ratios(entry: dict[str, Any]) -> dict[str, Any]:
    """Each row against dense, and CoLA through sketchcore against its plain-torch peer."""
    tokens, timed = entry["equal_tokens"], entry["equal_time"]
    out: dict[str, Any] = {}
    dense = tokens.get("dense")
    for row, r in tokens.items():
        line: dict[str, float] = {}
        if dense is not None:
            line["tokens_per_s_vs_dense"] = r["tokens_per_s"] / dense["tokens_per_s"]
            if "tokens_per_s_vs_dense_rounds" in r:
                line["tokens_per_s_vs_dense_rounds"] = r["tokens_per_s_vs_dense_rounds"]
            if r["peak_memory_mib"] is not None:
                line["peak_memory_vs_dense"] = r["peak_memory_mib"] / dense["peak_memory_mib"]
            line["saved_activations_vs_dense"] = r["saved_activations_mib"] / dense["saved_activations_mib"]
            line["val_loss_equal_tokens_vs_dense"] = r["final_val_loss"] / dense["final_val_loss"]
            if row in timed:  # the row's loss over dense's in the row's training time
                line["val_loss_equal_time_vs_dense"] = r["final_val_loss"] / timed[row]["final_val_loss"]
        out[row] = line
    if "cola_sketchcore" in tokens and "cola_torch" in tokens:
        ours, peer = tokens["cola_sketchcore"], tokens["cola_torch"]
        rounds = [p / o for p, o in zip(peer.get("interleaved_step_seconds", []), ours.get("interleaved_step_seconds", []))]
        out["cola_sketchcore_vs_cola_torch"] = {"tokens_per_s": ours["tokens_per_s"] / peer["tokens_per_s"],
                                                "peak_memory": ours["peak_memory_mib"] / peer["peak_memory_mib"]
                                                if ours["peak_memory_mib"] is not None else None,
                                                "saved_activations": ours["saved_activations_mib"]
                                                / peer["saved_activations_mib"],
                                                "tokens_per_s_rounds": {"median": statistics.median(rounds),
                                                                        "min": min(rounds), "max": max(rounds)}
                                                if rounds else None}
        memory = tokens.get("cola_sketchcore_memory")
        if memory is not None and memory["peak_memory_mib"] is not None:
            out["cola_sketchcore_vs_cola_torch"]["memory_mode_peak_memory"] = (memory["peak_memory_mib"]
                                                                               / peer["peak_memory_mib"])
    return out


def _machine(device: str) -> str:
    if device == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name()
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    return f"{model} ({platform.machine()}, load average {' '.join(load)} at the end)"


def saved_only(preset: dict[str, Any], rows: list[str]) -> dict[str, Any]:
    """Prints each row's saved activations on the training batch (as ``train`` counts them), the
    ratios to dense and to the plain-torch CoLA peer, and the largest storages each row keeps."""
    corpus = load_corpus(preset["corpus_bytes"])
    batch = batches(corpus.train, preset["batch"], preset["length"], torch.Generator().manual_seed(0))
    kept = {row: kept_storages(build(row, preset, SEED), batch, row.endswith("_memory"), preset.get("autocast"))
            for row in rows}  # the gpu preset's count in bfloat16, as it trains, also on the CPU
    mib = {row: sum(s["bytes"] for s in k.values()) / 2**20 for row, k in kept.items()}
    print("| row | saved activations MiB | × dense | × cola_torch |\n| --- | ---: | ---: | ---: |")
    for row in rows:
        ratio = {base: f"{mib[row] / mib[base]:.3f}" if base in mib else "–" for base in ("dense", "cola_torch")}
        print(f"| {row} | {mib[row]:.2f} | {ratio['dense']} | {ratio['cola_torch']} |")
    for row in rows:
        print(f"\n{row}: the largest kept storages\n" + "\n".join(largest(kept[row], 8)))
    return {"saved_activations_mib": mib}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="quick")
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, of {ROWS}")
    parser.add_argument("--lr", type=float, nargs="+", default=None, help="peak learning rate(s)")
    parser.add_argument("--warmup", type=float, nargs="+", default=[WARMUP],
                        help=f"the warm-up's share(s) of the steps, in [0, 1) (default {WARMUP})")
    parser.add_argument("--init-gain", type=float, nargs="+", default=[INIT_GAIN],
                        help="the low-rank factors' product scaled by this at initialisation (default 1)")
    parser.add_argument("--steps", type=int, default=None, help="override the preset's steps (say so in reports)")
    parser.add_argument("--no-equal-time", action="store_true", help="skip the equal wall-clock runs")
    parser.add_argument("--equal-time-rows", default=None,
                        help="comma-separated rows that train again at equal wall-clock (default: the preset's)")
    parser.add_argument("--out", type=Path, default=None, help="write PREFIX.json, PREFIX.md and PREFIX.png")
    parser.add_argument("--saved-only", action="store_true",
                        help="only count each row's saved activations (exact, seconds) and list the largest")
    args = parser.parse_args(argv)
    rows = [r for r in args.rows.split(",") if r]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        parser.error(f"--rows: expected names from {ROWS}, got {unknown}")
    bad = [w for w in args.warmup if not 0 <= w < 1] + [g for g in args.init_gain if not g > 0]
    if bad:
        parser.error(f"--warmup: expected shares in [0, 1), --init-gain: expected positive gains; got {bad}")
    if args.saved_only:
        return saved_only(PRESETS[args.preset], rows)
    if args.steps is not None:
        PRESETS[args.preset] = {**PRESETS[args.preset], "steps": args.steps,
                                "eval_every": max(1, min(PRESETS[args.preset]["eval_every"], args.steps // 2))}
    equal_time_rows = ([] if args.no_equal_time else
                       PRESETS[args.preset].get("equal_time_rows", rows) if args.equal_time_rows is None
                       else [r for r in args.equal_time_rows.split(",") if r])
    unknown = [r for r in equal_time_rows if r not in ROWS]
    if unknown:
        parser.error(f"--equal-time-rows: expected names from {ROWS}, got {unknown}")
    started = time.perf_counter()
    results = run(args.preset, rows, args.lr or [PRESETS[args.preset]["lr"]], equal_time_rows, tuple(args.warmup),
                  tuple(args.init_gain))
    results["wall_seconds"] = time.perf_counter() - started  # the whole preset (its time target)
    results["command"] = "python bench/pretrain.py " + " ".join(sys.argv[1:] if argv is None else argv)
    from pretrain_report import markdown, plot
    text = markdown(results)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(text + "\n")
        plot(results, args.out.with_suffix(".png"))
    return results


if __name__ == "__main__":
    main()
