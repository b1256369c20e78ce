"""bench/pretrain.py's outputs: a Markdown table per learning rate and the loss-versus-time plot."""
from __future__ import annotations

from pathlib import Path
from typing import Any


def markdown(results: dict[str, Any]) -> str:
    corpus, config = results["corpus"], results["config"]
    lines = [f"# Pretraining, preset `{results['preset']}`", "",
             f"Machine: {results['machine']}; torch {results['torch']}, {results['threads']} threads.",
             f"Model: LLaMA-style, hidden {config['hidden']}, {config['layers']} layers, {config['heads']} heads, "
             f"MLP {config['intermediate']}, rank {config['hidden'] // 4} = hidden/4 in the low-rank rows; "
             f"{config['batch']} × {config['length']} byte tokens a step, {config['steps']} steps "
             f"({config['batch'] * config['length'] * config['steps']:,} tokens) per row at equal tokens.",
             f"Text: {corpus['source']} of Python {corpus['python']} ({corpus['root']}): {corpus['files']} files, "
             f"{corpus['train_bytes']:,} training and {corpus['validation_bytes']:,} validation bytes, "
             f"sha256 {corpus['sha256']}.", ""]
    for run in results["runs"]:
        lines += [f"## Peak learning rate {run['lr']}", "",
                  "| row | params | tokens/s | × dense | peak MiB | × dense | saved activations MiB | × dense "
                  "| val loss, equal tokens | × dense | val loss, equal time (steps) | × dense |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for row, r in run["equal_tokens"].items():
            ratio = run["ratios"].get(row, {})
            timed = run["equal_time"].get(row)
            same_time = (f"{timed['final_val_loss']:.4f} ({timed['steps']})" if timed else
                         f"{r['final_val_loss']:.4f} ({r['steps']})" if row == "dense" else "–")

            def cell(key: str) -> str:
                return f"{ratio[key]:.3f}" if key in ratio else "–"

            spread = ratio.get("tokens_per_s_vs_dense_rounds")
            speed = cell("tokens_per_s_vs_dense") + (f" ({spread['min']:.2f}–{spread['max']:.2f})" if spread else "")
            lines.append(f"| {row} | {r['params']:,} | {r['tokens_per_s']:,.0f} | {speed} "
                         f"| {r['peak_memory_mib']:,.1f} | {cell('peak_memory_vs_dense')} "
                         f"| {r['saved_activations_mib']:,.2f} | {cell('saved_activations_vs_dense')} "
                         f"| {r['final_val_loss']:.4f} "
                         f"| {cell('val_loss_equal_tokens_vs_dense')} | {same_time} "
                         f"| {cell('val_loss_equal_time_vs_dense')} |")
        peer = run["ratios"].get("cola_sketchcore_vs_cola_torch")
        if peer:
            spread = peer.get("tokens_per_s_rounds")
            range_text = f" (per round {spread['min']:.2f}–{spread['max']:.2f})" if spread else ""
            lines += ["", f"CoLA through sketchcore against the plain-torch peer: tokens/s × {peer['tokens_per_s']:.3f}"
                          f"{range_text}, "
                          f"peak memory × {peer['peak_memory']:.3f}, saved activations × {peer['saved_activations']:.3f}."]
        lines += ["", "tokens/s: median of steps timed side by side after training (× dense: median ratio, per-round "
                      "range in parentheses). Peak MiB: the resident set's growth during training plus the parameters (CPU; every row in "
                      "one process, so allocator caching between rows shows); saved activations: the bytes autograd "
                      "keeps between one forward and its backward, parameters left out (exact, load-independent)."]
        lines.append("")
    lines.append(f"Command: `{results.get('command', '')}`")
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    runs = results["runs"]
    fig, axes = plt.subplots(1, len(runs), figsize=(6.5 * len(runs), 4.5), squeeze=False)
    for ax, run in zip(axes[0], runs):
        for row, r in run["equal_tokens"].items():
            points = [(p["seconds"], p["val_loss"]) for p in r["curve"]]
            line, = ax.plot(*zip(*points), marker=".", label=row)
            timed = run["equal_time"].get(row)
            if timed:
                ax.plot(*zip(*[(p["seconds"], p["val_loss"]) for p in timed["curve"]]), linestyle=":",
                        color=line.get_color(), label=f"{row}, equal time")
        ax.set_xlabel("training seconds")
        ax.set_ylabel("validation loss (nats per byte)")
        ax.set_title(f"preset {results['preset']}, peak lr {run['lr']}")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
