"""The end-to-end LLM benchmark (bench/llm_speed.py) in its seconds-long CI form and as a dry run
of its GPU plan on the CPU: every phase is measured for every model, the compressed models are
compressed as asked (aligned ranks within 1/4 of the decoder's linear parameters), their sketched
layers actually run in every split, and the files it writes hold what it printed. With int8 (the
quick preset), torch's int8 peer, our int8 factors and the factor pairs quantized by torch are
measured too: inference phases only, our int8 layers run in every split, and the model bytes shrink
in the order the quantization promises."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "llm_speed.py"
MODELS = ("dense", "lowrank", "sklinear")
INT8 = ("torch int8", "lowrank int8", "pairs int8")
try:  # torchao's int8 is a peer row where torchao imports (issue 62)
    import torchao.quantization  # noqa: F401
    INT8 += ("torchao int8",)
except Exception:  # noqa: BLE001 - any failure to import: the bench leaves the row out, and so does the check
    pass


def run(tmp_path, *args):
    out = tmp_path / "llm"
    done = subprocess.run([sys.executable, str(SCRIPT), *args, "--out", str(out)], capture_output=True, text=True,
                          timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(out.with_suffix(".json").read_text())
    assert out.with_suffix(".md").read_text() in done.stdout
    return data


def check(data, phases, models=MODELS):
    results, config = data["results"], data["meta"]["config"]
    assert list(results["phases"]) == phases
    for phase, rows in results["phases"].items():
        assert set(rows) == set(MODELS if phase == "train step" else models)
        assert rows["dense"]["ratio_median"] == 1.0  # each round's dense time over itself
        for row in rows.values():
            assert row["seconds_median"] > 0 and row["ratio_min"] <= row["ratio_median"] <= row["ratio_max"]
            if phase.startswith("decode"):
                batch = int(phase.split()[1][1:])
                assert row["tokens_per_s"] == pytest.approx(batch * config["new_tokens"] / row["seconds_median"])
    decoder_linears = 7 * config["layers"]
    for name in ("lowrank", "sklinear"):
        conversion = results["conversion"][name]
        assert conversion["linear_params_after"] <= 0.25 * conversion["linear_params_before"]
        assert all(rank % 16 == 0 or rank < 16 for rank in conversion["ranks"])
    for name in set(models) & {"lowrank", "sklinear", "lowrank int8"}:
        for phase, split in results["split"][name].items():
            assert split["sketched_ms"] > 0
            # one sketched call per converted layer per forward (the train step's forward too)
            assert split["sketched_calls"] == pytest.approx(decoder_linears), phase
    for name in set(models) & {"dense", "torch int8", "pairs int8"}:
        for phase, split in results["split"][name].items():
            assert split["sketched_calls"] == 0 and split["dense_linear_ms"] > 0
    for name in models:
        trained = {"train_mib"} if name in MODELS else set()
        assert set(results["memory"][name]) == {"prefill_mib", "decode_mib"} | trained
        assert all(value > 0 for value in results["memory"][name].values())
    # the compressed models hold fewer numbers, so their prefill peak is below the dense one
    assert results["memory"]["lowrank"]["prefill_mib"] < results["memory"]["dense"]["prefill_mib"]


def test_quick_preset_measures_every_phase_and_the_sketched_layers_run(tmp_path):
    data = run(tmp_path, "--preset", "quick")
    check(data, ["prefill eager", "decode b1 eager", "decode b2 eager", "train step"], MODELS + INT8)
    assert data["meta"]["dry_run"] is False and data["meta"]["preset"] == "quick"
    sizes = data["results"]["model_bytes"]
    # int8 holds a quarter of float32's bytes per weight; low rank int8 holds fewer weights still
    assert sizes["lowrank int8"] < sizes["pairs int8"] * 1.1 and sizes["pairs int8"] < sizes["torch int8"]
    assert sizes["torch int8"] < 0.5 * sizes["dense"] and sizes["lowrank int8"] < 0.6 * sizes["lowrank"]
    text = (tmp_path / "llm.md").read_text()
    assert "int8, head to head" in text and "model bytes: lowrank int8 / torch int8" in text
    assert ("vs torchao int8" in text) == ("torchao int8" in INT8)


def test_the_gpu_plan_dry_runs_on_the_cpu_with_compile_and_graph_capture_paths(tmp_path):
    data = run(tmp_path, "--preset", "gpu", "--dry-run", "--device", "cpu")
    check(data, ["prefill eager", "prefill compiled", "decode b1 eager", "decode b1 graphs", "decode b2 eager",
                 "decode b2 graphs", "train step"])
    assert data["meta"]["dry_run"] is True and data["meta"]["config"]["dtype"] == "bfloat16"


@pytest.mark.skipif(pytest.importorskip("torch").cuda.is_available(), reason="on a GPU the preset runs for real")
def test_the_gpu_preset_without_a_gpu_says_how_to_dry_run_it():
    done = subprocess.run([sys.executable, str(SCRIPT), "--preset", "gpu"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2 and "--dry-run --device cpu" in done.stderr
