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
