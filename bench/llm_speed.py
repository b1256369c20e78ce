"""End-to-end LLM speed: a LLaMA-shaped decoder, dense against compressed to 1/4 of its decoder's
linear parameters — prefill, training step, greedy decode, peak memory, and where the time goes.

The model is ``transformers``' ``LlamaForCausalLM`` built from a configuration (random weights, no
download). Compressed twins come from ``sketch_model(model, exclude=["lm_head"], param_ratio=0.25)``
as ``LowRankLinear`` and as ``SKLinear`` (one term): what a new user would do. Measured, per model:

- prefill: the forward over the prompt that ``generate`` runs (KV cache, last-token logits), eager
  and ``torch.compile``d;
- train: forward with labels, backward and an AdamW step;
- decode: greedy tokens/s with a static KV cache at each decode batch size (the new tokens over the
  time of the decode steps; the prompt's prefill runs untimed before each call), eager and — on a
  GPU — with CUDA graphs (``torch.compile(mode="reduce-overhead")`` of the decode step, as gpt-fast
  does);
- peak memory of each phase (GPU: torch's allocator and sketchcore's pool; CPU: resident-set
  growth plus the model's parameters);
- a split of the prefill forward, a decode step and a training step between the sketched layers,
  the remaining dense ``nn.Linear`` layers (``lm_head``) and everything else, timed by module hooks
  (which also count that the sketched layers ran);
- with int8 (the ``int8`` and ``quick`` presets, CPU float32; issue 49): torch's own int8
  (``quantize_dynamic`` of the dense model), our int8 factors (``quantize_``) with torch's int8
  on the ``lm_head``, and the same factors as two ``nn.Linear`` each with torch's int8 on
  everything (bench/int8_models.py); inference only (no training step), and each model's bytes.

Times alternate the models in rounds, so a slow minute falls on every model; a ratio is dense time /
model time per round; the table gives the median and [min, max] over rounds.

    python bench/llm_speed.py                       # GPU preset on a GPU (bf16, hidden 2048, 8 layers), else CPU
    python bench/llm_speed.py --preset cpu          # float32, hidden 1024, 4 layers, sketchcore's threads
    python bench/llm_speed.py --preset quick        # seconds: what CI runs (tests/bench/test_llm_speed_script.py)
    python bench/llm_speed.py --preset int8         # issue 49's model: int8 peers, vocab 8000, no training
    python bench/llm_speed.py --preset gpu --dry-run  # the GPU plan at toy sizes on any device: no figures
    python bench/llm_speed.py --out bench/results/llm-speed-DATE  # also writes DATE.json and DATE.md
"""
from __future__ import annotations

import argparse
import copy
import datetime
import inspect
import json
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

import sketchcore
from sketchcore.torch import Fp8LowRankLinear, Int8LowRankLinear, LowRankLinear, SKLinear, sketch_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from int8_models import QUANTIZED_MODELS, device_quantized_twins, int8_twins  # noqa: E402
from meters import PeakMemory, ModuleSplit, embedding_bytes, model_bytes, static_cache  # noqa: E402

PRESETS: dict[str, dict[str, Any]] = {
    "gpu": dict(device="cuda", dtype="bfloat16", hidden=2048, intermediate=5632, layers=8, vocab=32000,
                prefill=(8, 512), train=(8, 512), prompt=128, new_tokens=128, decode_batches=(1, 8), rounds=5,
                compile=True, graphs=True, int8=False),
    "cpu": dict(device="cpu", dtype="float32", hidden=1024, intermediate=2816, layers=4, vocab=32000,
                prefill=(1, 512), train=(1, 256), prompt=64, new_tokens=32, decode_batches=(1, 8), rounds=5,
                compile=True, graphs=False, int8=False),
    # issue 49's comparison: float32 inference against torch's int8 (no training step, no compile)
    "int8": dict(device="cpu", dtype="float32", hidden=1024, intermediate=2816, layers=4, vocab=8000,
                 prefill=(4, 128), train=None, prompt=64, new_tokens=32, decode_batches=(1, 8), rounds=5,
                 compile=False, graphs=False, int8=True),
    "quick": dict(device="cpu", dtype="float32", hidden=128, intermediate=352, layers=2, vocab=512,
                  prefill=(2, 64), train=(2, 32), prompt=16, new_tokens=6, decode_batches=(1, 2), rounds=2,
                  compile=False, graphs=False, int8=True),
}
DRY_RUN = dict(hidden=64, intermediate=176, layers=1, vocab=256, prefill=(2, 32), train=(2, 16), prompt=8,
               new_tokens=4, decode_batches=(1, 2), rounds=1)
MODELS = ("dense", "lowrank", "sklinear")
LABELS = {"lowrank": "LowRankLinear", "sklinear": "SKLinear", "lowrank int8": "LowRankLinear int8 + torch int8 lm_head",
          "pairs int8": "factor pairs, torch int8"}


def build_models(p: dict[str, Any], device: torch.device, dtype: torch.dtype) -> dict[str, torch.nn.Module]:
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(hidden_size=p["hidden"], intermediate_size=p["intermediate"], num_hidden_layers=p["layers"],
                         vocab_size=p["vocab"], num_attention_heads=max(1, p["hidden"] // 64),
                         num_key_value_heads=max(1, p["hidden"] // 64), max_position_embeddings=4096,
                         tie_word_embeddings=False)
    torch.manual_seed(0)
    dense = LlamaForCausalLM(config).to(dtype=torch.float32).eval()
    models = {"dense": dense}
    reports = {}
    for name, layer, terms in (("lowrank", "lowrank", None), ("sklinear", "sklinear", 1)):
        twin = copy.deepcopy(dense)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reports[name] = sketch_model(twin, terms, exclude=["lm_head"], param_ratio=0.25, layer=layer)
        models[name] = twin
    for name, model in models.items():
        models[name] = model.to(device=device, dtype=dtype)
    if p["int8"] and device.type == "cpu" and dtype == torch.float32:  # torch's dynamic int8 is CPU float32 only
        models.update(int8_twins(models["dense"], models["lowrank"]))
    models.update(device_quantized_twins(models["lowrank"], device))  # int8 / fp8 factors on a GPU, where open
    build_models.reports = reports  # type: ignore[attr-defined]
    return models


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


#: What a phase times: a function, or (setup, function) where setup runs untimed before each call.
Timed = Callable[[], Any] | tuple[Callable[[], Any], Callable[[], Any]]


def timed(work: Timed, device: torch.device, calls: int) -> float:
    """Median seconds of `calls` calls after one warm-up call (each after its setup, untimed)."""
    setup, fn = work if isinstance(work, tuple) else (lambda: None, work)
    times = []
    for call in range(calls + 1):
        setup()
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        if call:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def alternate(makers: dict[str, Callable[[], Timed]], device: torch.device, rounds: int,
              calls: int) -> dict[str, list[float]]:
    """Seconds per call of each model's function, in rounds that rotate the order of the models."""
    works = {name: make() for name, make in makers.items()}
    names = list(works)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            seconds[name].append(timed(works[name], device, calls))
    return seconds


def forward_kwargs(model: torch.nn.Module) -> dict[str, Any]:
    params = inspect.signature(model.forward).parameters
    return {"logits_to_keep": 1} if "logits_to_keep" in params else {"num_logits_to_keep": 1}


def cache_keyword(model: torch.nn.Module) -> str:
    """transformers 5.24 renamed ``past_key_values`` to ``cache``."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def prefill_fn(model: torch.nn.Module, ids: torch.Tensor, compiled: bool) -> Callable[[], Any]:
    kwargs = forward_kwargs(model)
    forward = torch.compile(model) if compiled else model

    def run() -> Any:
        with torch.no_grad():
            return forward(ids, use_cache=True, **kwargs).logits
    return run


def train_fn(model: torch.nn.Module, ids: torch.Tensor) -> Callable[[], Any]:
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)

    def run() -> Any:
        loss = model(ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss
    return run


def decode_session(model: torch.nn.Module, prompt: torch.Tensor, new_tokens: int,
                   graphs: bool) -> tuple[Callable[[], Any], Callable[[], torch.Tensor]]:
    """Greedy decoding of `new_tokens` tokens after the prompt, one token per forward, with a static
    KV cache, as two calls: the prefill (which resets the cache) and the decode steps after it;
    `graphs`: the decode step compiled with mode="reduce-overhead" (CUDA graphs on a GPU)."""
    batch, length = prompt.shape
    cache = static_cache(model, batch, length + new_tokens + 1, prompt.device)
    keyword = cache_keyword(model)
    state: dict[str, torch.Tensor] = {}

    def step(token: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        logits = model(token, **{keyword: cache}, cache_position=position, use_cache=True).logits
        return logits[:, -1].argmax(-1, keepdim=True)
    decode_step = torch.compile(step, mode="reduce-overhead", fullgraph=True) if graphs else step

    def prefill() -> None:
        cache.reset()
        with torch.no_grad():
            state["token"] = step(prompt, torch.arange(length, device=prompt.device))

    def steps() -> torch.Tensor:
        token = state["token"]
        tokens = [token]
        with torch.no_grad():
            for i in range(new_tokens):
                if graphs:
                    torch.compiler.cudagraph_mark_step_begin()
                token = decode_step(token.clone(), torch.tensor([length + i], device=prompt.device))
                tokens.append(token)
        return torch.cat(tokens, 1)
    return prefill, steps


def decode_fn(model: torch.nn.Module, prompt: torch.Tensor, new_tokens: int, graphs: bool) -> Callable[[], Any]:
    """The whole greedy generation (prefill, then the decode steps): what tokens/s counts."""
    prefill, steps = decode_session(model, prompt, new_tokens, graphs)

    def run() -> torch.Tensor:
        prefill()
        return steps()
    return run


def ratios_of(seconds: dict[str, list[float]]) -> dict[str, dict[str, Any]]:
    out = {}
    for name, times in seconds.items():
        per_round = [d / t for d, t in zip(seconds["dense"], times)]
        out[name] = {"seconds_median": statistics.median(times), "ratio_median": statistics.median(per_round),
                     "ratio_min": min(per_round), "ratio_max": max(per_round), "seconds": times}
    return out


def run(p: dict[str, Any], dry_run: bool) -> dict[str, Any]:
    device, dtype = torch.device(p["device"]), getattr(torch, p["dtype"])
    models = build_models(p, device, dtype)
    gen = torch.Generator().manual_seed(1)
    ids = lambda b, s: torch.randint(0, p["vocab"], (b, s), generator=gen).to(device)  # noqa: E731
    results: dict[str, Any] = {"phases": {}, "memory": {}, "split": {}, "conversion": {},
                               "model_bytes": {name: model_bytes(model) for name, model in models.items()},
                               "embedding_bytes": {name: embedding_bytes(model) for name, model in models.items()}}
    if p.get("sizes_only"):
        return results
    trainable = {name: model for name, model in models.items() if name not in QUANTIZED_MODELS}
    traceable = trainable  # the quantized layers call sketchcore directly: eager phases only
    for name, report in build_models.reports.items():  # type: ignore[attr-defined]
        results["conversion"][name] = {"ranks": sorted({row.rank for row in report.values()}),
                                       "linear_params_before": sum(r.params_before for r in report.values()),
                                       "linear_params_after": sum(r.params_after for r in report.values())}
    calls = 1 if dry_run else 3
    phases: dict[str, dict[str, Callable[[], Timed]]] = {}
    prompt_ids = ids(*p["prefill"])
    phases["prefill eager"] = {n: (lambda m=m: prefill_fn(m, prompt_ids, False)) for n, m in models.items()}
    if p["compile"]:
        phases["prefill compiled"] = {n: (lambda m=m: prefill_fn(m, prompt_ids, True)) for n, m in traceable.items()}
    for batch in p["decode_batches"]:
        prompt = ids(batch, p["prompt"])
        phases[f"decode b{batch} eager"] = {n: (lambda m=m, q=prompt: decode_session(m, q, p["new_tokens"], False))
                                            for n, m in models.items()}
        if p["graphs"]:
            phases[f"decode b{batch} graphs"] = {n: (lambda m=m, q=prompt: decode_session(m, q, p["new_tokens"], True))
                                                 for n, m in traceable.items()}
    for name, makers in phases.items():
        seconds = alternate(makers, device, p["rounds"], calls)
        results["phases"][name] = ratios_of(seconds)
        if name.startswith("decode"):
            tokens = int(name.split()[1][1:]) * p["new_tokens"]
            for model_name, row in results["phases"][name].items():
                row["tokens_per_s"] = tokens / row["seconds_median"]
    train_ids = ids(*p["train"]) if p["train"] else None
    if train_ids is not None:
        for model in trainable.values():
            model.train()
        results["phases"]["train step"] = ratios_of(alternate(
            {n: (lambda m=m: train_fn(m, train_ids)) for n, m in trainable.items()}, device, p["rounds"], calls))
        for model in trainable.values():
            model.eval()

    memory = PeakMemory(device)
    for name, model in models.items():
        row = {}
        work = [("prefill", lambda: prefill_fn(model, prompt_ids, False)),
                ("decode", lambda: decode_fn(model, ids(max(p["decode_batches"]), p["prompt"]), p["new_tokens"], False))]
        if train_ids is not None and name in trainable:
            work.append(("train", lambda: (model.train(), train_fn(model, train_ids))[1]))
        for phase, make in work:
            fn = make()
            memory.start(model)
            fn()
            row[phase + "_mib"] = memory.peak()
            model.eval()
        results["memory"][name] = row

    for name, model in models.items():
        split = ModuleSplit(model, device, sketched=(LowRankLinear, SKLinear, Int8LowRankLinear,
                                                               Fp8LowRankLinear))
        steps = 4  # a decode step's split: 4 steps after a prefill that is not recorded, over 4
        prefill, decode_steps = decode_session(model, ids(1, p["prompt"]), steps, False)
        decoded = split.measure(decode_steps, setup=prefill)
        results["split"][name] = {
            "prefill": split.measure(prefill_fn(model, prompt_ids, False)),
            "decode step": {key: value / steps for key, value in decoded.items()},
        }
        if train_ids is not None and name in trainable:
            results["split"][name]["train step"] = split.measure(train_fn(model.train(), train_ids))
        model.eval()
        split.remove()
    return results


def cpu_model() -> str:
    """The CPU's model name (Linux), else the machine type."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} ({platform.machine()})"
    except OSError:
        pass
    return platform.machine()


def markdown(meta: dict[str, Any], results: dict[str, Any]) -> str:
    lines = [f"# LLM speed, {meta['date']}", "", f"`{meta['command']}` — {meta['device']}; {meta['summary']}", ""]
    if meta["dry_run"]:
        lines += ["**Dry run: toy sizes, one round; these are not measurements.**", ""]
    names = list(results["model_bytes"])
    lines += ["", "Model bytes (MB; in brackets without the embedding table, of which a decode step reads one row per "
              "token): " + "; ".join(f"{LABELS.get(n, n)}: {b / 1e6:.1f} [{(b - results['embedding_bytes'][n]) / 1e6:.1f}]"
                                     for n, b in results["model_bytes"].items()), ""]
    if not results["phases"]:
        return "\n".join(lines + int8_summary(results)) + "\n"
    lines += ["| phase | " + " | ".join(LABELS.get(n, n) for n in names) + " |", "|" + " --- |" * (len(names) + 1)]
    for phase, rows in results["phases"].items():
        cells = []
        for name in names:
            row = rows.get(name)
            if row is None:
                cells.append("—")
                continue
            rate = f", {row['tokens_per_s']:.0f} tok/s" if "tokens_per_s" in row else ""
            ratio = "" if name == "dense" else (f" — **{row['ratio_median']:.2f}×** "
                                                f"[{row['ratio_min']:.2f}, {row['ratio_max']:.2f}]")
            cells.append(f"{row['seconds_median'] * 1e3:.1f} ms{rate}{ratio}")
        lines.append(f"| {phase} | " + " | ".join(cells) + " |")
    lines += ["", "Peak memory (MiB): " + "; ".join(
        f"{name}: " + ", ".join(f"{k.removesuffix('_mib')} {v:.0f}" for k, v in row.items())
        for name, row in results["memory"].items()), "", "Where the time goes (ms: sketched / dense linear / rest; "
        "sketched calls per call):", ""]
    for name, phases in results["split"].items():
        lines.append(f"- {name}: " + "; ".join(
            f"{phase} {s['sketched_ms']:.1f} / {s['dense_linear_ms']:.1f} / {s['rest_ms']:.1f} "
            f"({s['sketched_calls']})" for phase, s in phases.items()))
    lines += int8_summary(results)
    lines += ["", "Conversion: " + "; ".join(
        f"{name}: ranks {c['ranks']}, linear parameters {c['linear_params_before']:,} → {c['linear_params_after']:,}"
        for name, c in results["conversion"].items())]
    return "\n".join(lines) + "\n"


def head_to_head(rows: dict[str, Any], ours: str, peer: str) -> tuple[float, float, float]:
    """Median, min and max over rounds of peer time / our time (the models ran in the same rounds)."""
    per_round = [t_peer / t_ours for t_ours, t_peer in zip(rows[ours]["seconds"], rows[peer]["seconds"])]
    return statistics.median(per_round), min(per_round), max(per_round)


def int8_summary(results: dict[str, Any]) -> list[str]:
    """Issue 49's targets, as ratios in this run: our int8 model against torch's int8 (≥ 1.5×) and the
    torch-alone pairs (≥ 1×) per phase, and the model bytes against torch int8's (≤ 0.4)."""
    if "torch int8" not in results["model_bytes"]:
        return device_quantized_summary(results)
    lines = ["", "int8, head to head (peer time / lowrank int8 time, median [min, max] over rounds; issue 49's "
             "targets: ≥ 1.5× torch int8, ≥ 1× pairs int8):", ""]
    for phase, rows in results["phases"].items():
        if "lowrank int8" not in rows:
            continue
        peers = [peer for peer in ("torch int8", "pairs int8", "torchao int8") if peer in rows]
        cells = [f"vs {peer} **{m:.2f}×** [{lo:.2f}, {hi:.2f}]"
                 for peer in peers for m, lo, hi in [head_to_head(rows, "lowrank int8", peer)]]
        lines.append(f"- {phase}: " + "; ".join(cells))
    sizes, tables = results["model_bytes"], results["embedding_bytes"]
    read = {name: sizes[name] - tables[name] for name in sizes}
    lines.append(f"- model bytes: lowrank int8 / torch int8 = **{sizes['lowrank int8'] / sizes['torch int8']:.2f}**, "
                 f"without the embedding table **{read['lowrank int8'] / read['torch int8']:.2f}** (target ≤ 0.4)")
    return lines


def device_quantized_summary(results: dict[str, Any]) -> list[str]:
    """On a GPU: the low-rank model with int8 / fp8 factors against itself in bf16 per eager phase
    (issue 49's target: ≥ 1.3×), where those rows ran (their gated paths open)."""
    quantized = [name for name in ("lowrank int8", "lowrank fp8") if name in results["model_bytes"]]
    if not quantized:
        return []
    lines = ["", "8-bit factors on the device (lowrank time / quantized time, median [min, max] over rounds; "
             "issue 49's target: ≥ 1.3×):", ""]
    for phase, rows in results["phases"].items():
        if "lowrank" in rows and any(name in rows for name in quantized):
            cells = [f"{name} **{m:.2f}×** [{lo:.2f}, {hi:.2f}]" for name in quantized if name in rows
                     for m, lo, hi in [head_to_head(rows, name, "lowrank")]]
            lines.append(f"- {phase}: " + "; ".join(cells))
    return lines


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=tuple(PRESETS), default=None,
                        help="gpu on a machine with a CUDA device, else cpu")
    parser.add_argument("--dry-run", action="store_true", help="the preset's plan at toy sizes (runs every path)")
    parser.add_argument("--device", help="override the preset's device (cpu, cuda)")
    parser.add_argument("--rounds", type=int, help="override the preset's rounds")
    parser.add_argument("--out", help="write OUT.json and OUT.md")
    parser.add_argument("--sizes-only", action="store_true", help="build the models and count their bytes; no timing")
    args = parser.parse_args(argv)
    preset = args.preset or ("gpu" if torch.cuda.is_available() else "cpu")
    p = dict(PRESETS[preset])
    if args.dry_run:
        p.update(DRY_RUN)
    if args.device:
        p["device"] = args.device
    if args.rounds:
        p["rounds"] = args.rounds
    p["sizes_only"] = args.sizes_only
    if p["device"] == "cuda" and not torch.cuda.is_available():
        parser.error("--preset gpu needs a CUDA device; add --dry-run --device cpu to run its plan here")
    if p["graphs"] and p["device"] != "cuda" and not args.dry_run:
        p["graphs"] = False  # no CUDA graphs on the CPU
    results = run(p, args.dry_run)
    device_name = torch.cuda.get_device_name() if p["device"] == "cuda" else f"CPU {cpu_model()}, " \
        f"{sketchcore.get_num_threads()} sketchcore threads, {torch.get_num_threads()} torch threads"
    meta = {"date": datetime.date.today().isoformat(), "command": " ".join(["python bench/llm_speed.py", *(argv or sys.argv[1:])]),
            "device": device_name, "dry_run": args.dry_run, "preset": preset, "config": {k: list(v) if isinstance(v, tuple) else v for k, v in p.items()},
            "versions": {"torch": torch.__version__, "sketchcore": sketchcore.__version__,
                         "transformers": __import__("transformers").__version__},
            "summary": (f"LlamaForCausalLM hidden {p['hidden']}, intermediate {p['intermediate']}, {p['layers']} layers, "
                        f"vocab {p['vocab']}, {p['dtype']}; prefill {p['prefill'][0]}×{p['prefill'][1]}, train "
                        + (f"{p['train'][0]}×{p['train'][1]}" if p["train"] else "none")
                        + f", decode {p['new_tokens']} tokens after {p['prompt']}; "
                        f"{p['rounds']} rounds")}
    text = markdown(meta, results)
    print(text)
    if args.out:
        Path(args.out + ".json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
        Path(args.out + ".md").write_text(text)
    return {"meta": meta, "results": results}


if __name__ == "__main__":
    main()
