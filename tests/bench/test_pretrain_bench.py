"""The pretraining benchmark (bench/pretrain.py) in its seconds-long CI form: every row trains on
the standard library's text, the fused CoLA model and its plain-torch peer learn the same function
(same initial factors, same batches: the same losses), the recorded ratios are the measured ones,
and the files it writes hold what it printed."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("matplotlib")

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "pretrain.py"
ROWS = ("dense", "cola_sketchcore", "cola_torch", "cola_sketchcore_memory", "lowrank", "sklinear")


def test_quick_preset(tmp_path):
    out = tmp_path / "pretrain"
    done = subprocess.run([sys.executable, str(SCRIPT), "--preset", "quick", "--out", str(out)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(out.with_suffix(".json").read_text())
    assert out.with_suffix(".md").read_text() in done.stdout
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    corpus = data["corpus"]
    assert len(corpus["sha256"]) == 64 and corpus["files"] >= 10 and corpus["validation_bytes"] > 0
    (run,) = data["runs"]
    tokens, timed, ratios = run["equal_tokens"], run["equal_time"], run["ratios"]
    assert tuple(tokens) == ROWS and set(timed) == set(ROWS) - {"dense"}
    config = data["config"]
    for row, r in tokens.items():
        assert r["steps"] == config["steps"] and len(r["curve"]) == 1 + config["steps"] // config["eval_every"]
        assert r["curve"][0]["val_loss"] > r["final_val_loss"]  # it learned
        assert math.log(256) * 0.8 < r["curve"][0]["val_loss"] < math.log(256) * 1.2  # about uniform over bytes
        assert r["tokens_per_s"] > 0 and r["peak_memory_mib"] > r["params"] * 4 / 2**20  # at least the parameters
        assert ratios[row]["tokens_per_s_vs_dense"] == pytest.approx(r["tokens_per_s"] / tokens["dense"]["tokens_per_s"])
    # CoLA fused in sketchcore is the plain-torch CoLA: the same losses, step for step; the memory
    # mode recomputes what it dropped (torch's GEMM on the same Z: equal up to float rounding).
    for ours, memory, peer in zip(tokens["cola_sketchcore"]["curve"], tokens["cola_sketchcore_memory"]["curve"],
                                  tokens["cola_torch"]["curve"]):
        assert ours["val_loss"] == pytest.approx(peer["val_loss"], rel=1e-4)
        assert memory["val_loss"] == pytest.approx(ours["val_loss"], rel=1e-5)
    # Equal wall-clock: dense again, with as many steps as fit in each row's training time at dense's step time.
    for row, r in timed.items():
        budget = tokens[row]["step_seconds"] * config["steps"]
        assert r["row"] == "dense" and r["steps"] == max(1, round(budget / tokens["dense"]["step_seconds"]))
        assert ratios[row]["val_loss_equal_time_vs_dense"] == pytest.approx(tokens[row]["final_val_loss"]
                                                                           / r["final_val_loss"])
    assert tokens["cola_sketchcore"]["params"] == tokens["lowrank"]["params"] < tokens["dense"]["params"]


def test_equal_time_rows_chooses_which_rows_train_again(tmp_path):
    out = tmp_path / "pretrain"
    done = subprocess.run([sys.executable, str(SCRIPT), "--preset", "quick", "--rows", "dense,cola_torch,lowrank",
                           "--equal-time-rows", "cola_torch", "--steps", "2", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = json.loads(out.with_suffix(".json").read_text())["runs"]
    assert tuple(run["equal_tokens"]) == ("dense", "cola_torch", "lowrank")
    assert tuple(run["equal_time"]) == ("cola_torch",) and run["equal_time"]["cola_torch"]["row"] == "dense"
    assert "val_loss_equal_time_vs_dense" not in run["ratios"]["lowrank"]


def test_equal_time_rows_rejects_unknown_names():
    done = subprocess.run([sys.executable, str(SCRIPT), "--preset", "quick", "--equal-time-rows", "dense,cola"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 2
    assert "--equal-time-rows: expected names from" in done.stderr and "'cola'" in done.stderr


def test_row_steps_shortens_a_row_and_leaves_it_out_of_the_loss_comparisons(monkeypatch):
    sys.path.insert(0, str(SCRIPT.parent))
    import pretrain
    monkeypatch.setitem(pretrain.PRESETS, "quick", {**pretrain.PRESETS["quick"], "row_steps": {"cola_torch": 1}})
    monkeypatch.setattr(pretrain, "measure_peak_memory", lambda preset, row: 100.0 if row == "dense" else 50.0)
    (run,) = pretrain.run("quick", ["dense", "cola_torch", "lowrank"], [3e-3], ["cola_torch", "lowrank"])["runs"]
    tokens = run["equal_tokens"]
    assert tokens["cola_torch"]["steps"] == 1 and tokens["lowrank"]["steps"] == tokens["dense"]["steps"]
    assert tuple(run["equal_time"]) == ("lowrank",)  # a shortened row has no equal-time run
    assert run["ratios"]["lowrank"]["peak_memory_vs_dense"] == 0.5


def test_peak_memory_runs_in_a_fresh_process_with_a_fixed_mapping_threshold():
    sys.path.insert(0, str(SCRIPT.parent))
    import pretrain_memory
    # The memory mode keeps the r-wide intermediates only: its peak stays well below the same model's
    # without it, measured at the cpu preset's size (each row ten seconds).
    mode, plain = (pretrain_memory.measure("cpu", row, steps=2) for row in ("cola_sketchcore_memory", "cola_sketchcore"))
    assert 0 < mode < 0.8 * plain
    done = subprocess.run([sys.executable, pretrain_memory.__file__, "--preset", "quick", "--row", "dense"],
                          capture_output=True, text=True, timeout=600, env={k: v for k, v in os.environ.items()
                                                                              if k != "MALLOC_MMAP_THRESHOLD_"})
    assert done.returncode == 2 and "MALLOC_MMAP_THRESHOLD_: expected 131072" in done.stderr
    with pytest.raises(RuntimeError, match="row 'nonsense' failed"):
        pretrain_memory.measure("quick", "nonsense")


def test_the_recipe_options_repeat_the_rows_for_every_combination(monkeypatch):
    sys.path.insert(0, str(SCRIPT.parent))
    import pretrain
    monkeypatch.setattr(pretrain, "measure_peak_memory", lambda preset, row: 100.0)
    runs = pretrain.run("quick", ["dense", "cola_sketchcore"], [3e-3], [], (0.0, 0.5), (1.0, 4.0))["runs"]
    assert [(r["warmup"], r["init_gain"]) for r in runs] == [(0.0, 1.0), (0.0, 4.0), (0.5, 1.0), (0.5, 4.0)]
    loss = {(r["warmup"], r["init_gain"]): {row: t["final_val_loss"] for row, t in r["equal_tokens"].items()}
            for r in runs}
    # The gain changes only the low-rank factors: dense trains the same; the warm-up changes both.
    # (approx: the BLAS may round differently between two allocations of the same model)
    assert loss[(0.0, 1.0)]["dense"] == pytest.approx(loss[(0.0, 4.0)]["dense"], rel=1e-5)
    assert abs(loss[(0.0, 1.0)]["dense"] - loss[(0.5, 1.0)]["dense"]) > 1e-4
    assert abs(loss[(0.0, 1.0)]["cola_sketchcore"] - loss[(0.0, 4.0)]["cola_sketchcore"]) > 1e-4
    for r in runs:
        assert all(t["warmup"] == r["warmup"] and t["init_gain"] == r["init_gain"] for t in r["equal_tokens"].values())
    from pretrain_report import markdown
    assert "## Peak learning rate 0.003, warm-up 50% of the steps, init gain 4" in markdown(
        {**{"preset": "quick", "config": pretrain.PRESETS["quick"], "machine": "m", "torch": "t", "threads": 1},
         "corpus": {"source": "s", "python": "p", "root": "r", "files": 1, "train_bytes": 1, "validation_bytes": 1,
                    "sha256": "h"}, "runs": runs})


@pytest.mark.parametrize(("share", "steps", "expected"), [
    (0.1, 489, [i / 48 for i in range(1, 49)]),  # steps // 10 warm-up steps, as before the option
    (0.0, 10, []),  # none: the first step already at the peak
    (0.3, 10, [1 / 3, 2 / 3, 1.0]),
])
def test_learning_rate_warms_up_over_the_share_then_decays_to_a_tenth(share, steps, expected):
    sys.path.insert(0, str(SCRIPT.parent))
    from pretrain import learning_rate
    rates = [learning_rate(step, steps, 2.0, share) / 2.0 for step in range(steps)]
    assert rates[:len(expected)] == pytest.approx(expected)
    assert rates[len(expected)] == pytest.approx(1.0)  # the cosine starts at the peak
    assert rates[-1] == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi * (steps - len(expected) - 1)
                                                               / (steps - len(expected)))))
    assert all(a >= b for a, b in zip(rates[len(expected):], rates[len(expected) + 1:]))


def test_init_gain_scales_the_low_rank_product_and_leaves_dense_alone():
    sys.path.insert(0, str(SCRIPT.parent))
    import torch
    from pretrain import PRESETS
    from pretrain_models import build
    plain, scaled = (build("cola_torch", PRESETS["quick"], 7, gain) for gain in (1.0, 4.0))
    down = [m.down.weight for m in plain.modules() if hasattr(m, "down")]
    assert down and all(torch.equal(2 * a, b) for a, b in
                        zip(down, [m.down.weight for m in scaled.modules() if hasattr(m, "down")]))
    dense = [build("dense", PRESETS["quick"], 7, gain).state_dict() for gain in (1.0, 4.0)]
    assert all(torch.equal(dense[0][k], dense[1][k]) for k in dense[0])


@pytest.mark.parametrize("arguments", [["--warmup", "1.0"], ["--warmup", "-0.1"], ["--init-gain", "0"]])
def test_recipe_options_refuse_values_out_of_range(arguments):
    done = subprocess.run([sys.executable, str(SCRIPT), "--preset", "quick", *arguments], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2
    assert "--warmup: expected shares in [0, 1), --init-gain: expected positive gains" in done.stderr


def test_the_gpu_preset_has_the_cpu_presets_structure_and_reads_its_text_at_most_once():
    sys.path.insert(0, str(SCRIPT.parent))
    from pretrain import PRESETS
    from pretrain_data import load_corpus
    gpu, cpu = PRESETS["gpu"], PRESETS["cpu"]
    assert set(gpu) - {"autocast"} == set(cpu) and gpu["device"] == "cuda"
    assert gpu["hidden"] > cpu["hidden"] and gpu["layers"] > cpu["layers"]  # "larger"
    tokens = gpu["steps"] * gpu["batch"] * gpu["length"]
    assert tokens > cpu["steps"] * cpu["batch"] * cpu["length"]
    assert tokens <= load_corpus(gpu["corpus_bytes"]).train.numel()  # under one pass over the text (this Python)


def test_every_row_trains_with_the_recipes_fused_adamw():
    sys.path.insert(0, str(SCRIPT.parent))
    import torch
    from pretrain import make_optimizer
    optimizer = make_optimizer(torch.nn.Linear(4, 3), 2e-3)
    assert isinstance(optimizer, torch.optim.AdamW)
    assert optimizer.defaults["fused"] is True and optimizer.defaults["betas"] == (0.9, 0.95)
    assert optimizer.defaults["weight_decay"] == 0.0 and optimizer.defaults["lr"] == 2e-3
    source = (SCRIPT.parent / "pretrain_memory.py").read_text()  # the memory processes train with it too
    assert "make_optimizer(model" in source and "AdamW(" not in source


@pytest.mark.parametrize("n", range(1, 10))
def test_timing_orders_put_every_row_after_every_other_equally_often(n):
    sys.path.insert(0, str(SCRIPT.parent))
    from collections import Counter

    from pretrain import balanced_orders
    orders = balanced_orders(n)
    assert len(orders) == (n if n % 2 == 0 else 2 * n)
    assert all(sorted(order) == list(range(n)) for order in orders)
    follows = Counter((a, b) for order in orders for a, b in zip(order, order[1:]))
    pairs = [(a, b) for a in range(n) for b in range(n) if a != b]
    assert sorted(follows) == sorted(pairs) and len(set(follows.values())) <= 1  # each pair equally often
    assert len(set(Counter(order[0] for order in orders).values())) == 1  # and each row first equally often
    assert len(set(Counter(order[-1] for order in orders).values())) == 1  # and last
