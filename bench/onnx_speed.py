"""Compressed models served by onnxruntime: speed and agreement against the dense model exported
the same way and against onnxruntime's own ``quantize_dynamic`` of the dense model (issue 60).

Models: ``transformers`` BERT and LLaMA built from configs (random weights: speed does not depend on
the values; the agreement columns compare each ONNX model with the torch model it came from).
Rows per model, each an ONNX file run by one onnxruntime session on the same inputs:

- ``dense``: the model as built, ``torch.onnx.export(dynamo=True)``;
- ``dense + ort int8``: ``onnxruntime.quantization.quantize_dynamic`` of that file (int8 weights);
- ``low rank ρ``: ``sketch_model(param_ratio=ρ)``, exported with ``sketchcore.torch.export_onnx``;
- ``low rank ρ int8``: the same with ``quantize="int8"`` (sketchcore's int8 factors, exported as
  integer ONNX operators);
- ``low rank ρ + ort int8``: ``quantize_dynamic`` of the float low-rank file (what a user could do
  with onnxruntime's tools alone).

Speed: each round runs every session ``--iters`` times, in Williams' balanced orders; ratios are
per round against ``dense`` and against ``dense + ort int8`` (median, min, max).

    python bench/onnx_speed.py --out bench/results/onnx-speed-DATE
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from meters import balanced_orders  # noqa: E402
from pretrained_encoder_data import cpu_description  # noqa: E402

PRESETS = {
    # MiniLM-sized encoder and a small LLaMA (prefill of a prompt)
    "full": {"hidden": 384, "layers": 6, "ffn": 1536, "heads": 12, "batch": 8, "seq": 128, "rounds": 8, "iters": 5},
    "quick": {"hidden": 64, "layers": 2, "ffn": 128, "heads": 4, "batch": 2, "seq": 16, "rounds": 2, "iters": 2},
}


def build(kind: str, p: dict[str, int]) -> torch.nn.Module:
    import transformers

    torch.manual_seed(0)
    if kind == "bert":
        config = transformers.BertConfig(vocab_size=8000, hidden_size=p["hidden"], num_hidden_layers=p["layers"],
                                         num_attention_heads=p["heads"], intermediate_size=p["ffn"],
                                         max_position_embeddings=512)
        return transformers.BertModel(config).eval()
    config = transformers.LlamaConfig(vocab_size=8000, hidden_size=p["hidden"], num_hidden_layers=p["layers"],
                                      num_attention_heads=p["heads"], num_key_value_heads=p["heads"],
                                      intermediate_size=p["ffn"], max_position_embeddings=512, use_cache=False)
    return transformers.LlamaForCausalLM(config).eval()


class Wrapped(torch.nn.Module):
    """The model's first output as one tensor, from input ids (and BERT's attention mask)."""

    def __init__(self, model: torch.nn.Module, kind: str) -> None:
        super().__init__()
        self.model, self.kind = model, kind

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        if self.kind == "bert":
            return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits


def export(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], path: Path, sketched: bool) -> None:
    from sketchcore.torch import export_onnx

    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        if sketched:
            program = export_onnx(model, inputs)
        else:
            program = torch.onnx.export(model, inputs, dynamo=True, verbose=False)
    program.save(str(path))


def ort_int8(source: Path, target: Path) -> None:
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    logging.getLogger().setLevel(logging.ERROR)  # its advice to pre-process, printed on every call

    quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8)


def session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def make_rows(kind: str, p: dict[str, int], ratio: float, work: Path) -> tuple[dict[str, Path], dict[str, Any]]:
    """The ONNX files of every row, and each row's torch output on the timing inputs."""
    from sketchcore.torch import sketch_model

    ids = torch.randint(0, 8000, (p["batch"], p["seq"]))
    mask = torch.ones_like(ids)
    inputs = (ids, mask)
    files: dict[str, Path] = {}
    torch_out: dict[str, Any] = {}
    dense = Wrapped(build(kind, p), kind).eval()
    files["dense"] = work / f"{kind}-dense.onnx"
    export(dense, inputs, files["dense"], sketched=False)
    with torch.no_grad():
        torch_out["dense"] = dense(*inputs).numpy()
    files["dense + ort int8"] = work / f"{kind}-dense-ort-int8.onnx"
    ort_int8(files["dense"], files["dense + ort int8"])
    torch_out["dense + ort int8"] = torch_out["dense"]
    exclude = ["lm_head"] if kind == "llama" else []
    for quantize in (None, "int8"):
        name = f"low rank {ratio}" + (" int8" if quantize else "")
        model = Wrapped(build(kind, p), kind).eval()
        sketch_model(model, param_ratio=ratio, exclude=exclude, quantize=quantize)
        files[name] = work / f"{kind}-{name.replace(' ', '-')}.onnx"
        export(model, inputs, files[name], sketched=True)
        with torch.no_grad():
            torch_out[name] = model(*inputs).numpy()
    name = f"low rank {ratio} + ort int8"
    files[name] = work / f"{kind}-{name.replace(' ', '-').replace('+', 'plus')}.onnx"
    ort_int8(files[f"low rank {ratio}"], files[name])
    torch_out[name] = torch_out[f"low rank {ratio}"]
    return files, {"inputs": {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}, "torch": torch_out}


def feeds_for(sess: Any, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    names = [i.name for i in sess.get_inputs()]
    return {n: inputs[n] for n in names if n in inputs} if all(n in inputs for n in names) else \
        dict(zip(names, inputs.values()))


def time_sessions(sessions: dict[str, Any], feeds: dict[str, dict], rounds: int, iters: int) -> dict[str, list[float]]:
    names = list(sessions)
    seconds: dict[str, list[float]] = {n: [] for n in names}
    orders = balanced_orders(len(names))
    for n in names:  # warm-up: first-run allocations and kernel choices
        sessions[n].run(None, feeds[n])
    for r in range(rounds):
        for i in orders[r % len(orders)]:
            n = names[i]
            start = time.perf_counter()
            for _ in range(iters):
                sessions[n].run(None, feeds[n])
            seconds[n].append((time.perf_counter() - start) / iters)
    return seconds


def ratio_stats(seconds: dict[str, list[float]], base: str, name: str) -> dict[str, float]:
    per_round = [b / t for b, t in zip(seconds[base], seconds[name])]
    return {"median": statistics.median(per_round), "min": min(per_round), "max": max(per_round)}


def run_model(kind: str, p: dict[str, int], ratio: float, threads: int, work: Path) -> dict[str, Any]:
    files, data = make_rows(kind, p, ratio, work)
    sessions = {name: session(path, threads) for name, path in files.items()}
    feeds = {name: feeds_for(s, data["inputs"]) for name, s in sessions.items()}
    rows: dict[str, Any] = {}
    for name, s in sessions.items():
        out = s.run(None, feeds[name])[0]
        ref = data["torch"][name]
        dense_ref = data["torch"]["dense"]
        rows[name] = {"file_bytes": sum(f.stat().st_size for f in work.glob(files[name].name + "*")),
                      "rel_error_vs_its_torch_model": float(np.linalg.norm(out - ref) / np.linalg.norm(ref)),
                      "rel_error_vs_dense": float(np.linalg.norm(out - dense_ref) / np.linalg.norm(dense_ref)),
                      "custom_domain_nodes": custom_nodes(files[name])}
    seconds = time_sessions(sessions, feeds, p["rounds"], p["iters"])
    for name, row in rows.items():
        row["seconds_per_call"] = statistics.median(seconds[name])
        row["speed_vs_dense"] = ratio_stats(seconds, "dense", name)
        row["speed_vs_ort_int8_dense"] = ratio_stats(seconds, "dense + ort int8", name)
    return rows


def custom_nodes(path: Path) -> list[str]:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return sorted({f"{n.domain}::{n.op_type}" for n in model.graph.node if n.domain not in ("", "ai.onnx")})


def table(results: dict[str, Any]) -> str:
    lines = ["| model | row | s/call | × dense | × ort int8 dense | rel. error vs its torch model | file MB |",
             "|---|---|---|---|---|---|---|"]
    for kind, rows in results.items():
        for name, r in rows.items():
            d, q = r["speed_vs_dense"], r["speed_vs_ort_int8_dense"]
            lines.append(f"| {kind} | {name} | {r['seconds_per_call'] * 1e3:.2f} ms | {d['median']:.2f} "
                         f"({d['min']:.2f}–{d['max']:.2f}) | {q['median']:.2f} ({q['min']:.2f}–{q['max']:.2f}) | "
                         f"{r['rel_error_vs_its_torch_model']:.1e} | {r['file_bytes'] / 1e6:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="full")
    parser.add_argument("--models", default="bert,llama", help="comma-separated: bert, llama")
    parser.add_argument("--param-ratio", type=float, default=0.5)
    parser.add_argument("--threads", type=int, default=2, help="onnxruntime intra-op threads")
    parser.add_argument("--rounds", type=int, help="timing rounds (default: the preset's)")
    parser.add_argument("--out", type=Path, help="folder for results.json and results.md")
    args = parser.parse_args(argv)
    p = dict(PRESETS[args.preset])
    if args.rounds:
        p["rounds"] = args.rounds
    import onnxruntime

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.models.split(","):
            results[kind] = run_model(kind, p, args.param_ratio, args.threads, Path(tmp))
    text = table(results)
    print(text)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "preset": args.preset, "shape": p,
            "cpu": cpu_description(), "torch": torch.__version__, "onnxruntime": onnxruntime.__version__,
            "threads": args.threads, "command": " ".join(["python", "bench/onnx_speed.py", *(argv or sys.argv[1:])])}
    data = {"meta": meta, "results": results}
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(data, indent=1))
        (args.out / "results.md").write_text(f"{text}\n\n{json.dumps(meta, indent=1)}\n")
    return data


if __name__ == "__main__":
    main()
