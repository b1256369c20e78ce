"""sketchcore.tuner on the digits MLP (64 → 256 → 256 → 10): the spectral search meets the
threshold with ≤ 0.75× the stored numbers in ≤ 60 counted accuracy calls, beats a black-box
search given 5× its evaluations, and the Panther API around it (black-box searches, optimization
function, results table, save/load, replace_without_tuning)."""
import json
import sys

import pytest
import torch
from torch import nn

from _digits_mlp import black_box_search, digits_task
from sketchcore._ranks import aligned_ranks, is_aligned
from sketchcore.torch import LowRankLinear, SKLinear
from sketchcore.tuner import (Categorical, GridSearch, Int, LayerConfig, RandomSearch, SKAutoTuner, SpectralSearch,
                              TuningConfigs)
from sketchcore.tuner._candidates import stored


@pytest.fixture(scope="module")
def task():
    return digits_task(seed=0)


@pytest.fixture
def fresh(task):
    """A copy of the trained model per test (tuners replace layers in place)."""
    import copy
    model, accuracy, dense = task
    return copy.deepcopy(model), accuracy, dense


class Counted:
    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, model):
        self.calls += 1
        return self.fn(model)


def test_auto_meets_threshold_with_three_quarters_of_the_size_in_60_calls(fresh):
    model, accuracy, dense = fresh
    dense_size = stored(model)
    counted = Counted(accuracy)
    tuner = SKAutoTuner(model, TuningConfigs([LayerConfig({"type": "Linear"}, params="auto")]), counted,
                        accuracy_threshold=dense - 0.01)
    best = tuner.tune()
    assert counted.calls == tuner.evaluations <= 60
    assert stored(model) == dense_size and accuracy(model) == dense  # tune() leaves the model dense
    tuned = tuner.apply_best_params()
    assert tuned is model
    assert stored(tuned) <= 0.75 * dense_size
    assert accuracy(tuned) >= dense - 0.01
    assert stored(tuned) == tuner.best_assignment_size
    assert any(isinstance(m, LowRankLinear) for m in tuned.modules())
    for name, entry in best.items():
        module = tuned.get_submodule(name)
        assert (entry["params"] is None) == isinstance(module, nn.Linear)
        if entry["params"] is not None:
            assert module.rank == entry["params"]["rank"]


def test_smaller_or_equal_than_random_search_with_five_times_the_evaluations(fresh):
    """The black box: uniform draws over the same space (per layer, any size-saving rank or
    dense), each one full evaluation, 5× the tuner's evaluations. (TPE is compared in bench/.)"""
    model, accuracy, dense = fresh
    tuner = SKAutoTuner(model, LayerConfig({"type": "Linear"}), accuracy, accuracy_threshold=dense - 0.01)
    tuner.tune()
    theirs, trials, _ = black_box_search(model, accuracy, dense - 0.01, 5 * tuner.evaluations, "random")
    assert trials == 5 * tuner.evaluations
    assert tuner.best_assignment_size <= theirs


def test_dense_threshold_keeps_the_dense_accuracy(fresh):
    """accuracy_threshold="dense": the dense model's score is the threshold (lossless compression)."""
    model, accuracy, dense = fresh
    tuner = SKAutoTuner(model, LayerConfig(["0", "2"]), accuracy, accuracy_threshold="dense")
    tuner.tune()
    tuned = tuner.apply_best_params()
    assert accuracy(tuned) >= dense and stored(tuned) < 85002
    assert tuner.accuracy_threshold == "dense" and tuner.dense_accuracy == dense
    assert all(row["meets_threshold"] == (row["accuracy"] >= dense) for row in tuner.history)


def test_budget_is_respected(fresh):
    model, accuracy, dense = fresh
    counted = Counted(accuracy)
    tuner = SKAutoTuner(model, LayerConfig({"type": "Linear"}), counted, SpectralSearch(max_evaluations=4),
                        accuracy_threshold=dense - 0.01, num_runs_per_param=2)
    tuner.tune()
    assert counted.calls == tuner.evaluations <= 4
    assert accuracy(tuner.apply_best_params()) >= dense - 0.01


def test_dense_below_threshold_warns_and_keeps_dense(fresh):
    model, accuracy, dense = fresh
    tuner = SKAutoTuner(model, LayerConfig({"type": "Linear"}), accuracy, accuracy_threshold=dense + 0.5)
    with pytest.warns(UserWarning, match="below accuracy_threshold"):
        best = tuner.tune()
    assert all(entry["params"] is None and entry["best_layer"] is None for entry in best.values())
    assert tuner.evaluations == 1


def test_optimization_function_picks_the_feasible_model_it_scores_highest(fresh):
    """Among the feasible models evaluated, the one the optimization function prefers (here: the
    largest first layer) wins, not the smallest."""
    model, accuracy, dense = fresh

    def first_layer_rank(m):
        layer = m.get_submodule("0")
        return float(layer.rank if isinstance(layer, LowRankLinear) else 1000)

    tuner = SKAutoTuner(model, LayerConfig({"type": "Linear"}), accuracy, accuracy_threshold=dense - 0.01,
                        optimization_eval_func=first_layer_rank)
    best = tuner.tune()
    feasible = [row for row in tuner.history if row["meets_threshold"]]
    top = max(1000 if row["layers"]["0"] is None else row["layers"]["0"]["rank"] for row in feasible)
    chosen = best["0"]["params"]
    assert (1000 if chosen is None else chosen["rank"]) == top
    table = tuner.get_results_dataframe()  # a pandas DataFrame when pandas is installed, else a list of dicts
    rows = table.to_dict("records") if hasattr(table, "to_dict") else table
    assert any(row["speed"] is not None and row["speed"] == row["speed"] for row in rows)  # not None, not NaN


@pytest.mark.parametrize("search", [RandomSearch(n_trials=6, seed=1), GridSearch()])
def test_panther_black_box_loop(fresh, search):
    """Panther's loop: each layer tuned alone (the others dense), one evaluation per trial, then
    one evaluation of the combined choice."""
    model, accuracy, dense = fresh
    counted = Counted(accuracy)
    config = LayerConfig({"type": "Linear", "indices": [0, 1]}, params={"rank": Categorical([4, 16, 48])})
    tuner = SKAutoTuner(model, config, counted, search, accuracy_threshold=dense - 0.02)
    best = tuner.tune()
    per_layer = 6 if isinstance(search, RandomSearch) else 3
    assert counted.calls == tuner.evaluations == 2 * per_layer + (tuner.final_accuracy is not None)
    for name in ("0", "2"):
        rows = tuner.results[name]
        assert len(rows) == per_layer
        feasible = [r for r in rows if r["accuracy"] >= dense - 0.02]
        if feasible:  # the smallest feasible setting of that layer alone
            assert best[name]["params"] == min(feasible, key=lambda r: r["parameters"])["params"]


def test_optuna_search(fresh):
    pytest.importorskip("optuna")
    from sketchcore.tuner import OptunaSearch
    model, accuracy, dense = fresh
    counted = Counted(accuracy)
    config = LayerConfig(["2"], params={"rank": Int(2, 64, step=2)})
    tuner = SKAutoTuner(model, config, counted, OptunaSearch(n_trials=8, seed=0), accuracy_threshold=dense - 0.02)
    best = tuner.tune()
    assert counted.calls == 8 + (tuner.final_accuracy is not None)
    if best["2"]["params"] is not None:
        assert accuracy(tuner.apply_best_params()) >= dense - 0.02


def test_optuna_missing_is_a_clear_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)
    from sketchcore.tuner._optuna import OptunaSearch
    with pytest.raises(ImportError, match="pip install optuna"):
        OptunaSearch()


def test_sklinear_params_and_joint_group(fresh):
    """Explicit num_terms/low_rank give SKLinear (SVD init); separate=False shares one setting."""
    model, accuracy, dense = fresh
    config = LayerConfig({"pattern": "^[02]$"}, params={"num_terms": [1, 2], "low_rank": [4, 8, 16]},
                         separate=False)
    tuner = SKAutoTuner(model, config, accuracy, accuracy_threshold=dense - 0.03)
    best = tuner.tune()
    assert best["0"]["params"] == best["2"]["params"]
    tuned = tuner.apply_best_params()
    if best["0"]["params"] is not None:
        assert isinstance(tuned.get_submodule("0"), SKLinear)
        assert tuned.get_submodule("0").num_terms == best["0"]["params"]["num_terms"]
    assert accuracy(tuned) >= dense - 0.03


def test_save_and_load_round_trip(fresh, tmp_path, task):
    model, accuracy, dense = fresh
    tuner = SKAutoTuner(model, LayerConfig({"type": "Linear"}), accuracy, accuracy_threshold=dense - 0.01)
    best = tuner.tune()
    path = tmp_path / "sub" / "results.json"
    tuner.save_tuning_results(path)
    assert json.loads(path.read_text())["best_params"]["0"]["params"] == best["0"]["params"]
    import copy
    other_model = copy.deepcopy(task[0])
    other = SKAutoTuner(other_model, LayerConfig({"type": "Linear"}), accuracy, accuracy_threshold=dense - 0.01)
    other.load_tuning_results(path)
    assert other.evaluations == tuner.evaluations
    assert {k: v["params"] for k, v in other.best_params.items()} == {k: v["params"] for k, v in best.items()}
    assert accuracy(other.apply_best_params()) == accuracy(tuner.apply_best_params())


def test_load_errors(fresh, tmp_path):
    model, accuracy, _ = fresh
    tuner = SKAutoTuner(model, LayerConfig(["0"]), accuracy)
    with pytest.raises(FileNotFoundError, match="not found"):
        tuner.load_tuning_results(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match=r"bad.json': expected a pickle .* or JSON .*, got neither \(JSONDecodeError"):
        tuner.load_tuning_results(bad)
    bad.write_text(json.dumps({"results": {}}))
    with pytest.raises(ValueError, match="expected a file written by save_tuning_results"):
        tuner.load_tuning_results(bad)
    bad.write_text(json.dumps({"format": "sketchcore.tuner/1", "best_params": {
        "0": {"params": {"rank": 65}, "copy_weights": True}}, "results": {}}))
    with pytest.raises(ValueError, match=r"layer '0': params \{'rank': 65\}: .*rank: expected at most "
                                         r"min\(in, out\) = 64"):
        tuner.load_tuning_results(bad)
    bad.write_text(json.dumps({"format": "sketchcore.tuner/1", "best_params": {
        "2": {"params": {"rank": 4}, "copy_weights": True}}, "results": {}}))
    with pytest.raises(ValueError, match=r"layer '2' is not selected by this tuner's configs \(they select \['0'\]\)"):
        tuner.load_tuning_results(bad)
    with pytest.raises(RuntimeError, match="call tune\\(\\) or load_tuning_results\\(\\) first"):
        tuner.apply_best_params()


def test_results_table_without_pandas(fresh, monkeypatch):
    model, accuracy, dense = fresh
    tuner = SKAutoTuner(model, LayerConfig(["4"]), accuracy, SpectralSearch(max_evaluations=3),
                        accuracy_threshold=dense - 0.05)
    tuner.tune()
    monkeypatch.setitem(sys.modules, "pandas", None)
    rows = tuner.get_results_dataframe()
    assert isinstance(rows, list) and len(rows) == tuner.evaluations
    assert {"layer_name", "score", "accuracy", "speed", "parameters"} <= set(rows[0])


def test_replace_without_tuning(fresh):
    model, accuracy, dense = fresh
    weights = {name: model.get_submodule(name).weight.detach().clone() for name in ("0", "2")}
    tuner = SKAutoTuner(model, [LayerConfig(["0"], "auto"), LayerConfig(["2"], {"num_terms": [2, 1], "low_rank": [8]})],
                        accuracy)
    replaced = tuner.replace_without_tuning(tolerance=0.5)
    first, second = replaced.get_submodule("0"), replaced.get_submodule("2")
    assert isinstance(first, LowRankLinear) and isinstance(second, SKLinear)
    assert (second.num_terms, second.low_rank) == (2, 8)  # Panther's rule: the first value of each
    error = torch.linalg.norm(first.weight - weights["0"]) / torch.linalg.norm(weights["0"])
    assert error <= 0.5
    s = torch.linalg.svdvals(weights["0"].double())
    # the smallest rank of the "auto" grid (ranks the GPU kernels like) that meets the tolerance
    assert is_aligned(first.rank) or first.rank < 16
    smaller = [r for r in aligned_ranks(first.rank) if r < first.rank]
    assert not smaller or torch.sqrt((s[smaller[-1]:] ** 2).sum() / (s ** 2).sum()) > 0.5
    with pytest.raises(ValueError, match="tolerance: expected a number in \\[0, 1\\)"):
        tuner.replace_without_tuning(tolerance=1.5)
