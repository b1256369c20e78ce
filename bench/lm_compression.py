#!/usr/bin/env python
"""End-to-end compression of a small language model, on the CPU it runs on.

A LLaMA-architecture decoder (``transformers``, built from a small random configuration, tied
embeddings) is trained from scratch on a real local corpus — the Python standard library's own
source files, split by file into train and validation, byte-level tokens — then its linear
layers (every projection of every decoder block) are compressed to 20 / 40 / 60 % fewer
parameters by

* ``svd``: ``LowRankLinear`` from the weights' truncated SVD,
* ``data-aware svd``: ``LowRankLinear`` from the whitened truncation on calibration activations
  (``sketch_model(..., calibration=...)``),
* ``sklinear svd``: Panther's ``SKLinear`` (1 term) with the SVD initialisation,
* ``sklinear data-aware``: the same, initialised from the calibration activations,
* ``panther init``: ``SKLinear`` (1 term) with Panther's own random-sign initialisation,

and each is evaluated (validation perplexity per byte) before and after a short fine-tune, with
the peak memory of the fine-tune (resident-set growth over the step loop: gradients, optimiser
state, activations) against the dense model fine-tuned the same way. Training-step time is
measured at the end, all models in turn for several rounds (so that load from other processes
falls on every model alike): the median per model, with the spread of its round medians.
Then, for int8 inference (issue 49; ``--int8-fewer``, the ``svd`` model at that reduction after
its fine-tune): the dense model, torch's int8 (``quantize_dynamic``), the low-rank model in
float32, with int8 factors (``quantize_``), and with int8 factors plus torch's int8 on the
``lm_head`` — validation perplexity, bytes, and inference time of the validation forward (all in
turn, in rounds). Writes ``<out>.json``, ``<out>.md`` and ``<out>.png``.

    python bench/lm_compression.py --out bench/results/lm-compression-2026-11-23
    python bench/lm_compression.py --methods svd --int8-fewer 0.4 --out ...   # the int8 rows, faster

Not run in CI (minutes). Needs ``transformers`` and ``matplotlib``.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import platform
import statistics
import sys
import sysconfig
import time
import warnings
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from meters import ResidentPeak  # noqa: E402

METHODS = ("svd", "data-aware svd", "sklinear svd", "sklinear data-aware", "panther init")
FEWER = (0.2, 0.4, 0.6)  # fraction of the linear layers' parameters removed


def _reexec_with_mmap_threshold() -> None:
    """Peak memory is read from the process's resident set: a fixed mmap threshold makes glibc
    return freed tensors to the system at once, so the peak of one configuration is not hidden
    by memory a previous one left in the heap."""
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") is None and sys.platform.startswith("linux"):
        os.environ["MALLOC_MMAP_THRESHOLD_"] = "65536"
        os.execv(sys.executable, [sys.executable, *sys.argv])


def corpus(limit_train: int, limit_val: int) -> tuple[bytes, bytes, dict[str, int]]:
    """The standard library's .py files (tests and site-packages excluded), sorted; a file goes to
    validation when crc32(relative path) % 10 == 0. Each split is cut at its byte limit."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if not any(part in ("site-packages", "test", "tests", "idlelib")
                                                           for part in p.relative_to(root).parts))
    train, val = bytearray(), bytearray()
    counts = {"train_files": 0, "validation_files": 0}
    for path in files:
        split = val if zlib.crc32(str(path.relative_to(root)).encode()) % 10 == 0 else train
        limit = limit_val if split is val else limit_train
        if len(split) >= limit:
            continue
        split.extend(path.read_bytes()[: limit - len(split)])
        counts["validation_files" if split is val else "train_files"] += 1
    return bytes(train), bytes(val), counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="bench/results/lm-compression")
    parser.add_argument("--train-steps", type=int, default=300)
    parser.add_argument("--finetune-steps", type=int, default=15)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--calibration", type=int, default=32, help="calibration sequences (of --seq bytes)")
    parser.add_argument("--val-windows", type=int, default=128)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--timing-rounds", type=int, default=4)
    parser.add_argument("--timing-steps", type=int, default=2, help="training steps per model per round")
    parser.add_argument("--int8-fewer", type=float, default=0.4,
                        help="int8 rows from the svd model at this reduction (one of 0.2, 0.4, 0.6; negative: none)")
    parser.add_argument("--replot", action="store_true", help="rewrite <out>.md and <out>.png from <out>.json")
    args = parser.parse_args()
    if args.replot:
        out = Path(args.out)
        saved = json.loads(out.with_suffix(".json").read_text())
        out.with_suffix(".md").write_text(markdown(saved["meta"], saved["rows"])
                                          + int8_markdown(saved.get("int8", []), saved["meta"]["args"].get("int8_fewer")))
        plot(saved["rows"], out.with_suffix(".png"))
        return
    _reexec_with_mmap_threshold()
    started = time.perf_counter()

    import torch
    import transformers
    import sketchcore.torch as sct

    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    train_bytes, val_bytes, files = corpus(8_000_000, 400_000)
    train_data = torch.frombuffer(bytearray(train_bytes), dtype=torch.uint8).long()
    val_data = torch.frombuffer(bytearray(val_bytes), dtype=torch.uint8).long()
    gen = torch.Generator().manual_seed(0)

    def batch(data: torch.Tensor, size: int, g: torch.Generator) -> torch.Tensor:
        starts = torch.randint(0, len(data) - args.seq - 1, (size,), generator=g)
        return torch.stack([data[s:s + args.seq + 1] for s in starts.tolist()])

    # validation: fixed, evenly spaced windows over the whole validation split
    stride = (len(val_data) - args.seq - 1) // args.val_windows
    val_windows = torch.stack([val_data[i * stride:i * stride + args.seq + 1] for i in range(args.val_windows)])
    calibration = [{"input_ids": w[:, :-1]} for w in batch(train_data, args.calibration, gen).split(8)]

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=args.hidden, intermediate_size=3 * args.hidden,
                                      num_hidden_layers=args.layers, num_attention_heads=4, num_key_value_heads=4,
                                      max_position_embeddings=args.seq, tie_word_embeddings=True, bos_token_id=0,
                                      eos_token_id=0, pad_token_id=0)
    dense = transformers.LlamaForCausalLM(config)

    def loss_of(model: torch.nn.Module, windows: torch.Tensor) -> torch.Tensor:
        logits = model(input_ids=windows[:, :-1], use_cache=False).logits
        return torch.nn.functional.cross_entropy(logits.reshape(-1, 256).float(), windows[:, 1:].reshape(-1))

    def perplexity(model: torch.nn.Module) -> float:
        model.eval()
        with torch.no_grad():
            losses = [float(loss_of(model, w)) for w in val_windows.split(32)]
        model.train()
        return math.exp(statistics.fmean(losses))

    def train(model: torch.nn.Module, steps: int, lr: float, seed: int, memory: ResidentPeak | None = None
              ) -> list[float]:
        """AdamW with linear warm-up (10%) and cosine decay; returns each step's seconds (the
        same work as the timed steps of the end)."""
        g = torch.Generator().manual_seed(seed)
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr,
                                      weight_decay=0.0, betas=(0.9, 0.95))
        warm = max(1, steps // 10)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min((s + 1) / warm, 0.5 * (
            1 + math.cos(math.pi * min(1.0, s / steps)))))
        model.train()
        times = []
        if memory is not None:
            memory.start()
        for _ in range(steps):
            windows = batch(train_data, args.batch, g)
            begin = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            loss_of(model, windows).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            times.append(time.perf_counter() - begin)
        return times

    t0 = time.perf_counter()
    train(dense, args.train_steps, 3e-3, seed=1)
    train_seconds = time.perf_counter() - t0
    dense_ppl = perplexity(dense)
    print(f"dense: trained {args.train_steps} steps in {train_seconds:.0f} s, validation perplexity {dense_ppl:.3f}",
          flush=True)

    include = ["model.layers.*"]
    linear_params = sum(m.weight.numel() for n, m in dense.named_modules()
                        if isinstance(m, torch.nn.Linear) and n.startswith("model.layers."))

    def finetuned(model: torch.nn.Module) -> dict[str, float]:
        memory = ResidentPeak()
        train(model, args.finetune_steps, 1e-3, seed=2, memory=memory)
        peak = memory.peak()
        return {"ppl_after": perplexity(model), "peak_mib": peak}

    rows = []
    models = []  # kept for the interleaved timing at the end (small)
    reference = copy.deepcopy(dense)
    rows.append({"method": "dense", "fewer": 0.0, "linear_params": linear_params, "ppl_before": dense_ppl,
                 **finetuned(reference)})
    models.append(reference)
    print(f"dense fine-tuned: {rows[-1]}", flush=True)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for fewer in FEWER:
        for method in methods:
            model = copy.deepcopy(dense)
            options: dict = {"param_ratio": 1.0 - fewer, "include": include}
            if method in ("svd", "data-aware svd"):
                options["layer"] = "lowrank"
            else:
                options.update(num_terms=1, layer="sklinear", init="panther" if method == "panther init" else "svd")
            if "data-aware" in method:
                options["calibration"] = calibration
            begin = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                report = sct.sketch_model(model, **options)
            convert_s = time.perf_counter() - begin
            after = sum(r.params_after for r in report.values())
            row = {"method": method, "fewer": fewer, "linear_params": after, "convert_s": convert_s,
                   "ppl_before": perplexity(model)}
            row.update(finetuned(model))
            rows.append(row)
            models.append(model)
            print(f"{method:>20} {fewer:.0%} fewer: params {after:,} ({1 - after / linear_params:.1%} fewer), "
                  f"ppl {row['ppl_before']:.3f} -> {row['ppl_after']:.3f}, peak {row['peak_mib']:.1f} MiB, "
                  f"convert {convert_s:.1f} s", flush=True)

    # before the timed training steps below, which train the models further
    int8 = []
    source = next((i for i, r in enumerate(rows) if r["method"] == "svd" and r["fewer"] == args.int8_fewer), None)
    if source is not None:
        int8 = int8_rows(dense, models[source], perplexity, lambda m: loss_of(m, val_windows[:32]),
                         args.timing_rounds)
        print("int8: " + ", ".join(f"{r['model']} ppl {r['ppl']:.4f} {r['forward_ms']:.1f} ms" for r in int8), flush=True)

    rounds: list[list[float]] = [[] for _ in models]
    for r in range(args.timing_rounds):
        for i, model in enumerate(models):
            times = train(model, args.timing_steps + 1, 1e-4, seed=100 + r)[1:]  # the first step builds the optimiser
            rounds[i].append(statistics.median(times))
    for row, medians in zip(rows, rounds):
        row["step_ms"] = 1e3 * statistics.median(medians)
        row["step_ms_spread"] = [1e3 * min(medians), 1e3 * max(medians)]
    print("step ms: " + ", ".join(f"{r['method']} {r['fewer']:.0%} {r['step_ms']:.0f}" for r in rows), flush=True)


    meta = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "machine": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "threads": args.threads, "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version(),
            "command": "python " + " ".join(sys.argv), "args": vars(args), "corpus": {
                "root": sysconfig.get_paths()["stdlib"], "train_bytes": len(train_bytes),
                "validation_bytes": len(val_bytes), **files},
            "model": {"architecture": "LlamaForCausalLM", "hidden": args.hidden, "layers": args.layers,
                      "intermediate": 3 * args.hidden, "heads": 4, "vocab": 256, "tied_embeddings": True,
                      "parameters": sum(p.numel() for p in dense.parameters()), "linear_layer_parameters": linear_params},
            "train_seconds": train_seconds, "total_seconds": time.perf_counter() - started}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows, "int8": int8}, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(meta, rows) + int8_markdown(int8, args.int8_fewer))
    plot(rows, out.with_suffix(".png"))
    print(f"wrote {out}.{{json,md,png}} in {meta['total_seconds']:.0f} s")


def int8_rows(dense, lowrank, perplexity, forward, rounds: int) -> list[dict]:
    """Issue 49's rows: dense, torch int8, the low-rank model in float32 and with int8 factors
    (alone, and with torch's int8 on the lm_head): perplexity, bytes, inference time."""
    import torch
    from int8_models import inference_rows, torch_int8
    from sketchcore.torch import quantize_

    factors = quantize_(copy.deepcopy(lowrank), "int8")
    models = {"dense": dense, "torch int8 dynamic": torch_int8(dense), "low rank float32": lowrank,
              "low rank int8": factors, "low rank int8 + torch int8 lm_head": torch_int8(factors)}
    for model in models.values():
        model.eval()
    with torch.no_grad():
        return inference_rows(models, perplexity, forward, rounds)


def int8_markdown(rows: list[dict], fewer) -> str:
    if not rows:
        return ""
    base = {r["model"]: r for r in rows}
    lines = ["", f"## int8 inference (the svd model at {fewer:.0%} fewer linear parameters, after its fine-tune)", "",
             "Validation perplexity per byte; bytes held (parameters, buffers, torch's packed int8 weights); the "
             "validation forward (32 windows, eval, no autograd), all models in turn per round: median [min–max].", "",
             "| model | ppl | Δ ppl vs its float model | MB | forward ms [spread] (× dense) |", "|---|---|---|---|---|"]
    for r in rows:
        reference = base["dense"] if r["model"] in ("dense", "torch int8 dynamic") else base["low rank float32"]
        delta = f"{100 * (r['ppl'] / reference['ppl'] - 1):+.3f} %"
        lines.append(f"| {r['model']} | {r['ppl']:.4f} | {delta} | {r['bytes'] / 1e6:.2f} | {r['forward_ms']:.1f} "
                     f"[{r['forward_ms_spread'][0]:.1f}–{r['forward_ms_spread'][1]:.1f}] "
                     f"({base['dense']['forward_ms'] / r['forward_ms']:.2f}×) |")
    lines.append("\nIssue 49's accuracy target: int8 factors raise perplexity by ≤ 1 % over float32 factors. The "
                 "lm_head is tied to the embedding: torch's int8 lm_head is an untied int8 copy, so it adds bytes here.\n")
    return "\n".join(lines)


def markdown(meta: dict, rows: list[dict]) -> str:
    dense = rows[0]
    lines = [f"# Compressing a small language model ({meta['date']})", "",
             f"`{meta['command']}` — {meta['model']['architecture']} ({meta['model']['layers']} layers, hidden "
             f"{meta['model']['hidden']}, {meta['model']['parameters']:,} parameters of which "
             f"{meta['model']['linear_layer_parameters']:,} in the decoder's linear layers, tied embeddings), "
             f"byte-level, trained from scratch for {meta['args']['train_steps']} steps "
             f"({meta['args']['batch']}×{meta['args']['seq']} bytes) on {meta['corpus']['train_files']} files of the "
             f"Python {meta['python']} standard library ({meta['corpus']['train_bytes']:,} bytes); validation "
             f"perplexity per byte on {meta['args']['val_windows']} windows of "
             f"{meta['corpus']['validation_files']} held-out files. Fine-tune: "
             f"{meta['args']['finetune_steps']} AdamW steps (lr 1e-3), the same for every row. Step time "
             f"(forward + backward + optimiser): all models in turn, {meta['args']['timing_rounds']} rounds of "
             f"{meta['args']['timing_steps']} steps; the median of the round medians, [min, max] of them in "
             f"brackets. Peak: resident-set growth during the fine-tune (MiB). CPU: {meta['machine']}, {meta['threads']} threads, torch {meta['torch']}, "
             f"transformers {meta['transformers']}; the machine was shared with other jobs, so times are noisy.", "",
             "| fewer linear params | method | params | ppl before fine-tune | ppl after | step ms [spread] (× dense) | "
             "peak MiB (× dense) |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        fewer = "dense" if row["method"] == "dense" else f"{row['fewer']:.0%}"
        lines.append(f"| {fewer} | {row['method']} | {row['linear_params']:,} | {row['ppl_before']:.3f} | "
                     f"{row['ppl_after']:.3f} | {row['step_ms']:.0f} [{row['step_ms_spread'][0]:.0f}–{row['step_ms_spread'][1]:.0f}] "
                     f"({row['step_ms'] / dense['step_ms']:.2f}×) | "
                     f"{row['peak_mib']:.1f} ({row['peak_mib'] / dense['peak_mib']:.2f}×) |")
    lines += ["", "Perplexity increase before any fine-tune, data-aware over plain SVD (the issue's bar: ≤ 0.5 at 20%):", ""]
    for fewer in FEWER:
        plain = next((r for r in rows if r["method"] == "svd" and r["fewer"] == fewer), None)
        aware = next((r for r in rows if r["method"] == "data-aware svd" and r["fewer"] == fewer), None)
        if plain and aware:
            ratio = (aware["ppl_before"] - dense["ppl_before"]) / (plain["ppl_before"] - dense["ppl_before"])
            lines.append(f"- {fewer:.0%} fewer: +{aware['ppl_before'] - dense['ppl_before']:.3f} vs "
                         f"+{plain['ppl_before'] - dense['ppl_before']:.3f} (ratio {ratio:.2f})")
    lines.append(f"\nTotal run time {meta['total_seconds']:.0f} s (dense training {meta['train_seconds']:.0f} s).\n")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dense = rows[0]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4), sharey=True)
    for ax, key, title in ((axes[0], "ppl_before", "before fine-tune"), (axes[1], "ppl_after", "after fine-tune")):
        for method in dict.fromkeys(r["method"] for r in rows[1:]):
            points = [(100 * r["fewer"], r[key] - dense[key]) for r in rows if r["method"] == method]
            ax.plot(*zip(*points), marker="o", label=method)
        ax.axhline(0.0, color="black", linestyle="--", label=f"dense ({dense[key]:.3f})")
        ax.set_yscale("symlog", linthresh=0.01)  # Panther's initialisation is 100x further off than the rest
        ax.set_xlabel("fewer parameters in the linear layers (%)")
        ax.set_title(f"{title}: validation perplexity − dense's")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("perplexity per byte − dense (symlog)")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
