"""SKAutoTuner's spectral search against Panther-style black-box searches on the digits MLP
(64 → 256 → 256 → 10, tests/_digits_mlp.py) at accuracy_threshold = dense − 0.01.

The black-box searches get 5× the tuner's evaluations over the same space (per Linear layer: a
LowRankLinear of any size-saving rank from the SVD, or dense), each trial one full evaluation:
Optuna's TPE (Panther's default sampler; skipped without optuna) and uniform random search.
Reported per task seed: evaluations, the smallest feasible model's stored size, and whether the
tuner's model is equal or smaller. Sizes are stored numbers (parameters + buffers).

Run: pytest bench/test_bench_tuner.py --benchmark-disable -s
"""
import pathlib
import sys

import pytest

from conftest import BOUNDS, INFO

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "tests"))
from _digits_mlp import black_box_search, digits_task  # noqa: E402

from sketchcore.tuner import LayerConfig, SKAutoTuner  # noqa: E402
from sketchcore.tuner._candidates import stored  # noqa: E402

SEEDS = (0, 1, 2)
RESULTS: dict[int, dict[str, object]] = {}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_spectral_search_vs_black_box(seed, sampler):
    if sampler == "tpe":
        pytest.importorskip("optuna")
    model, accuracy, dense = digits_task(seed=seed)
    threshold = dense - 0.01
    calls = []

    def counted(m):
        calls.append(1)
        return accuracy(m)

    tuner = SKAutoTuner(model, LayerConfig({"type": "Linear"}, "auto"), counted, accuracy_threshold=threshold)
    tuner.tune()
    ours, evaluations = tuner.best_assignment_size, len(calls)
    tuned = tuner.apply_best_params()
    assert accuracy(tuned) >= threshold and stored(tuned) == ours
    model, accuracy, dense = digits_task(seed=seed)
    theirs, trials, ranks = black_box_search(model, accuracy, threshold, 5 * evaluations, sampler, seed=seed)
    dense_size = stored(model)
    INFO[f"tuner vs {sampler} seed={seed}"] = (
        f"tuner {evaluations} evaluations → {ours} stored ({ours / dense_size:.3f}× dense {dense_size}); "
        f"{sampler} {trials} evaluations → {theirs} ({theirs / dense_size:.3f}×, ranks {ranks}); "
        f"tuner {'≤' if ours <= theirs else '>'} black box")
    BOUNDS[f"tuner size / {sampler} size, seed={seed}"] = (ours / theirs, 1.0, "", "≤")
    BOUNDS[f"tuner evaluations, seed={seed}"] = (evaluations, 60, "calls", "≤")
