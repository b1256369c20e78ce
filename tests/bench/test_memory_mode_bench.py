"""The memory mode's benchmarks in their seconds-long CI form: bench/pretrain.py --saved-only (the
exact saved-activation counts: the memory mode keeps less than the CoLA model without it, which
keeps less than its plain-torch peer, and the printed ratios are the counted ones) and
bench/memory_mode_cost.py (every variant timed every round, the cache metered)."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _run(*args):
    done = subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_saved_only_counts():
    out = _run(BENCH / "pretrain.py", "--preset", "quick", "--saved-only",
               "--rows", "dense,cola_torch,cola_sketchcore,cola_sketchcore_memory")
    rows = {m[1]: (float(m[2]), float(m[3]), float(m[4]))
            for m in re.finditer(r"^\| (\w+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", out, re.M)}
    assert set(rows) == {"dense", "cola_torch", "cola_sketchcore", "cola_sketchcore_memory"}
    mib = {row: r[0] for row, r in rows.items()}
    assert mib["cola_sketchcore_memory"] < mib["cola_sketchcore"] < mib["cola_torch"]
    for row, (value, vs_dense, vs_peer) in rows.items():
        assert vs_dense == pytest.approx(value / mib["dense"], rel=0.02)  # MiB printed to 2 decimals
        assert vs_peer == pytest.approx(value / mib["cola_torch"], rel=0.02)
    assert "cola_sketchcore_memory: the largest kept storages" in out


def test_memory_mode_cost_quick():
    out = _run(BENCH / "memory_mode_cost.py", "--preset", "quick", "--rounds", "2")
    variants = re.findall(r"^\| (plain|memory|memory_no_cache) \| [\d.]+ \|", out, re.M)
    assert variants == ["plain", "memory", "memory_no_cache"]
    cached = float(re.search(r"at most ([\d.]+) MiB", out).group(1))
    assert cached > 0  # the quick model's MLP outputs were recomputed and cached in its backward


@pytest.mark.parametrize("row", ["dense", "cola_sketchcore"])
def test_saved_count_in_bfloat16_as_the_gpu_preset_trains(row):
    import torch
    sys.path.insert(0, str(BENCH))
    from pretrain import PRESETS, SEED
    from pretrain_models import build
    from pretrain_saved import kept_storages
    batch = torch.randint(0, 256, (PRESETS["quick"]["batch"], PRESETS["quick"]["length"]),
                          generator=torch.Generator().manual_seed(SEED))
    memory = row.endswith("_memory")
    wide = kept_storages(build(row, PRESETS["quick"], SEED), batch, memory)
    narrow = kept_storages(build(row, PRESETS["quick"], SEED), batch, memory, autocast="bfloat16")
    assert PRESETS["gpu"]["autocast"] == "bfloat16"
    assert {s["dtype"] for s in wide.values()} <= {"float32", "int64", "bool"}
    assert "bfloat16" in {s["dtype"] for s in narrow.values()}  # (log-softmax stays float32, as autocast runs it)
    # (at this toy size the float32 logits and their log-softmax are a large part of the count)
    assert sum(s["bytes"] for s in narrow.values()) < 0.95 * sum(s["bytes"] for s in wide.values())
