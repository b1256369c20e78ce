"""bench/pretrain.py's outputs: a Markdown table per learning rate and the loss-versus-time plot."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from pretrain_models import INIT_GAIN, WARMUP


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
        lines += [f"## Peak learning rate {run['lr']}, warm-up {run.get('warmup', WARMUP):.0%} of the steps, "
                  f"init gain {run.get('init_gain', INIT_GAIN):g}", "",
                  "| row | params | tokens/s | × dense | peak MiB | × dense | saved activations MiB | × dense "
                  "| val loss, equal tokens (steps) | × dense | dense's val loss in the row's time (steps) | row × that |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for row, r in run["equal_tokens"].items():
            ratio = run["ratios"].get(row, {})
            timed = run["equal_time"].get(row)
            same_time = f"{timed['final_val_loss']:.4f} ({timed['steps']})" if timed else "–"
            full = r["steps"] == config["steps"]  # a row of the preset's row_steps trains fewer

            def cell(key: str) -> str:
                return f"{ratio[key]:.3f}" if key in ratio else "–"

            spread = ratio.get("tokens_per_s_vs_dense_rounds")
            speed = cell("tokens_per_s_vs_dense") + (f" ({spread['min']:.2f}–{spread['max']:.2f})" if spread else "")
            peak = f"{r['peak_memory_mib']:,.1f}" if r["peak_memory_mib"] is not None else "–"
            lines.append(f"| {row} | {r['params']:,} | {r['tokens_per_s']:,.0f} | {speed} "
                         f"| {peak} | {cell('peak_memory_vs_dense')} "
                         f"| {r['saved_activations_mib']:,.2f} | {cell('saved_activations_vs_dense')} "
                         f"| {r['final_val_loss']:.4f} ({r['steps']}) "
                         f"| {cell('val_loss_equal_tokens_vs_dense') if full else '–'} | {same_time} "
                         f"| {cell('val_loss_equal_time_vs_dense')} |")
        peer = run["ratios"].get("cola_sketchcore_vs_cola_torch")
        if peer:
            spread = peer.get("tokens_per_s_rounds")
            range_text = (f" (per round: median {spread['median']:.3f}, {spread['min']:.2f}–{spread['max']:.2f})"
                          if spread else "")
            peak = f"peak memory × {peer['peak_memory']:.3f}, " if peer["peak_memory"] is not None else ""
            mode = (f"; in the memory mode peak memory × {peer['memory_mode_peak_memory']:.3f}"
                    if "memory_mode_peak_memory" in peer else "")
            lines += ["", f"CoLA through sketchcore against the plain-torch peer: tokens/s × {peer['tokens_per_s']:.3f}"
                          f"{range_text}, {peak}saved activations × {peer['saved_activations']:.3f}{mode}."]
        lines += ["", "tokens/s: median of steps timed side by side after training (× dense: median ratio, per-round "
                      "range in parentheses). Peak MiB: on the CPU the resident set's growth over three training steps "
                      "plus the parameters, each row in a fresh process with glibc's mapping threshold fixed at 128 KiB "
                      "(bench/pretrain_memory.py); on a GPU the most torch's allocator and sketchcore's pool held. "
                      "Saved activations: the bytes autograd keeps between one forward and its backward, parameters left "
                      "out (exact, load-independent). Equal time: dense trained again for as many steps as fit in the "
                      "row's training time, its schedule fitted to them; a row with fewer steps than the preset's "
                      "(the memory mode: the same gradients as cola_sketchcore) is there for its speed and memory."]
        lines.append("")
    if "wall_seconds" in results:
        lines.append(f"Whole run: {results['wall_seconds']:,.0f} s ({results['wall_seconds'] / 60:.1f} minutes), "
                     "training, evaluation, timing rounds and the per-row memory processes together.")
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
                        color=line.get_color(), label=f"dense in {row}'s time")
        ax.set_xlabel("training seconds")
        ax.set_ylabel("validation loss (nats per byte)")
        ax.set_title(f"preset {results['preset']}, peak lr {run['lr']}, warm-up {run.get('warmup', WARMUP):.0%}, "
                     f"init gain {run.get('init_gain', INIT_GAIN):g}", fontsize=9)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
