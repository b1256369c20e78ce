"""bench/lm_compression.py at toy sizes (a few training steps, one method): it trains, compresses,
fine-tunes and times as before, and its int8 rows (issue 49) compare the dense model, torch's
int8, the low-rank model in float32 and with int8 factors on the same validation windows — the
files it writes hold them."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("matplotlib")

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "lm_compression.py"
INT8_ROWS = ["dense", "torch int8 dynamic", "low rank float32", "low rank int8", "low rank int8 + torch int8 lm_head"]


def test_toy_run_writes_the_int8_rows_with_perplexity_bytes_and_time(tmp_path):
    out = tmp_path / "lm"
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--train-steps", "4", "--finetune-steps",
                           "1", "--batch", "4", "--seq", "32", "--hidden", "32", "--layers", "1", "--calibration",
                           "8", "--val-windows", "32", "--methods", "svd", "--timing-rounds", "1", "--timing-steps",
                           "1", "--int8-fewer", "0.4"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(out.with_suffix(".json").read_text())
    rows = {row["model"]: row for row in data["int8"]}
    assert list(rows) == INT8_ROWS
    for row in rows.values():
        assert row["ppl"] > 1 and row["forward_ms"] > 0 and row["bytes"] > 0
        assert row["forward_ms_spread"][0] <= row["forward_ms"] <= row["forward_ms_spread"][1]
    svd = next(r for r in data["rows"] if r["method"] == "svd" and r["fewer"] == 0.4)
    assert rows["low rank float32"]["ppl"] == pytest.approx(svd["ppl_after"], rel=1e-6)  # the same model, evaluated twice
    assert rows["low rank int8"]["ppl"] != rows["low rank float32"]["ppl"]  # the int8 factors really ran
    assert rows["low rank int8"]["bytes"] < rows["low rank float32"]["bytes"]
    assert rows["torch int8 dynamic"]["bytes"] < rows["dense"]["bytes"]
    text = out.with_suffix(".md").read_text()
    assert "## int8 inference" in text and all(f"| {name} |" in text for name in INT8_ROWS)
