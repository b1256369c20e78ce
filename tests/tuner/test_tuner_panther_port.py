"""Panther code runs unchanged: tests/tuner/panther_port/ holds Panther's autotuning tutorial and tuner
README examples written in Panther's API (our own code, with ``panther`` renamed ``sketchcore`` in
the imports and a small CPU model). Each runs here as a user runs it — a fresh interpreter in an
empty directory — and must reach its end; the scripts assert what the tutorial and README promise
(speed in the rows, the study, the grid, the pickle, ...)."""
import os
import pathlib
import pickle
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("optuna", reason="Panther's examples use OptunaSearch (optuna is in the test extras)")
pytest.importorskip("pandas", reason="Panther's examples read get_results_dataframe() (pandas is in the test extras)")
pytest.importorskip("matplotlib", reason="the examples draw Optuna's plots (matplotlib is in the test extras)")

PORT = pathlib.Path(__file__).parent / "panther_port"


def run_script(name, directory):
    # one thread per process: the shared CI cores are not oversubscribed by torch's pool
    env = {**os.environ, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, str(PORT / name)], cwd=directory, capture_output=True, text=True,
                          timeout=600, env=env)


def test_autotuning_tutorial_runs_to_the_end(tmp_path):
    done = run_script("autotuning_tutorial.py", tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.rstrip().endswith("tutorial: done")
    assert "Speedup:" in done.stdout and "Best parameters found:" in done.stdout
    with open(tmp_path / "best_config.pkl", "rb") as f:  # the results file of the complete example
        saved = pickle.load(f)
    assert set(saved["best_params"]) == {"layers.0.attn.q_proj", "layers.0.attn.k_proj", "layers.0.attn.v_proj",
                                         "layers.0.attn.out_proj", "layers.0.mlp.0", "layers.0.mlp.2"}
    assert (tmp_path / "transformer_tuning.db").stat().st_size > 0
    assert (tmp_path / "history.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tuner_readme_runs_to_the_end(tmp_path):
    done = run_script("tuner_readme.py", tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.rstrip().endswith("readme: done")
    for plot in ("history.png", "importances.png", "parallel.png", "contour.png"):
        assert (tmp_path / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", plot


def test_the_ports_use_panthers_api_only_through_renamed_imports():
    """The scripts import sketchcore only where Panther's code imports panther, from the same
    module paths (``panther.tuner...`` → ``sketchcore.tuner...``)."""
    panther_paths = {"sketchcore.tuner", "sketchcore.tuner.SkAutoTuner", "sketchcore.tuner.SkAutoTuner.Configs",
                     "sketchcore.tuner.SkAutoTuner.Searching"}
    for script in PORT.glob("*.py"):
        imports = [line.split()[1] for line in script.read_text().splitlines()
                   if line.startswith(("from sketchcore", "import sketchcore"))]
        assert imports and set(imports) <= panther_paths, (script.name, imports)
