"""The table and the plot of bench/pretrained_encoder.py, from its results.json payload."""
from __future__ import annotations

from pathlib import Path
from typing import Any


def _ratio(r: dict[str, float] | None) -> str:
    if not r:
        return "—"
    return f"{r['median']:.2f}× [{r['min']:.2f}–{r['max']:.2f}]"


def _size(row: dict[str, Any]) -> str:
    text = f"{row['encoder_bytes_ratio']:.2f}"
    if row.get("params_ratio") is not None:
        text += f" (params {row['params_ratio']:.2f})"
    return text


def _convert(row: dict[str, Any]) -> str:
    text = f"{row.get('convert_s', 0.0):.1f}"
    if "heal_s" in row:
        text += f" + heal {row['heal_s']:.0f}"
    return text


def markdown(payload: dict[str, Any]) -> str:
    meta, rows = payload["meta"], payload["rows"]
    cpu, model, data = meta["cpu"], meta["model"], meta["data"]
    if model.get("package"):
        what = (f"all-MiniLM-L6-v2 from the PyPI package `{model['package']}=={model['version']}` "
                f"(model.safetensors sha256 `{model['model_safetensors_sha256'][:16]}…`)")
    else:
        what = "a toy random-init BERT (quick preset: checks the machinery, not quality)"
    lines = [f"# Compressing a pretrained encoder ({meta['date']})", "",
             f"`{meta['command']}` — {what}, {model['config']['num_hidden_layers']} layers, hidden "
             f"{model['config']['hidden_size']}, FFN {model['config']['intermediate_size']}. Text: {data['source']}: "
             f"{data['calibration']} calibration sentences, a disjoint held-out corpus of {data['corpus']} "
             f"({data['queries']} of them queries). CPU: {cpu['model']} ({', '.join(cpu['isa']) or 'no AVX'}; torch "
             f"capability {cpu['torch_cpu_capability']}), {meta['timing']['threads']} threads, torch {meta['torch']}, "
             f"transformers {meta['transformers']}; sketchcore commit {str(meta['git'].get('commit'))[:10]}"
             + (" (src/python modified)" if meta['git'].get('src_or_python_modified') else "") + ".", "",
             "Cosine: mean over the held-out sentences of the cosine between the row's embedding and the original's. "
             "Recall@10: the overlap of each query's 10 nearest neighbours (by the row's embeddings) with the "
             "original's, /10, averaged. Speed: encoding the corpus in batches of "
             f"{data['batch']} ({meta['timing']['rounds']} rounds, balanced orders, ratios per round: median "
             "[min–max]). Size: the encoder's bytes (all but the embedding tables) × the original's; for our rows, "
             "in brackets, the linear layers' parameters × the original's. Convert: wall seconds (+ healing).", "",
             "| row | cosine | recall@10 | sentences/s | speed × original | speed × torch int8 | size × original | "
             "convert s |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        if not row["run"]:
            continue
        lines.append(f"| {row['name']} | {row['cosine']:.4f} | {row['recall@10']:.3f} | {row['sentences_per_s']:.0f} | "
                     f"{_ratio(row['speed_vs_original'])} | {_ratio(row['speed_vs_torch_int8'])} | {_size(row)} | "
                     f"{_convert(row)} |")
    skipped = [row for row in rows if not row["run"]]
    if skipped:
        lines += ["", "Not run:", ""] + [f"- {row['name']}: {row['reason']}" for row in skipped]
    lines += ["", f"Total {meta['total_s']:.0f} s.", ""]
    return "\n".join(lines)


def plot(payload: dict[str, Any], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in payload["rows"] if r["run"]]
    fig, ax = plt.subplots(figsize=(8, 5.2))
    for row in rows:
        x, y = row["speed_vs_original"]["median"], row["cosine"]
        lo, hi = row["speed_vs_original"]["min"], row["speed_vs_original"]["max"]
        ours = row["name"] not in ("original", "torch int8", "torchao int8")
        ax.errorbar([x], [y], xerr=[[x - lo], [hi - x]], fmt="o" if ours else "s", capsize=3,
                    color="tab:blue" if ours else "tab:gray")
        ax.annotate(row["name"], (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8)
    ax.set_xlabel("encoding speed × original (median of rounds, [min, max])")
    ax.set_ylabel("mean cosine to the original's embedding")
    title = "all-MiniLM-L6-v2" if payload["meta"]["model"].get("package") else "toy BERT (quick preset)"
    ax.set_title(f"{title}: quality against speed ({payload['meta']['cpu']['model']})", fontsize=10)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
