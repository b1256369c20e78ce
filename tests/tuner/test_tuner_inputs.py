"""What users really pass to SKAutoTuner, and what the tuner's choice means: accuracy values that are
not one finite number, thresholds on another scale than the scores, accuracy_threshold=None
(Panther's "most accurate"), "dense", results rows with accuracy/speed/score, params="auto" and
search spaces larger than the dense layers."""
import warnings
from fractions import Fraction

import numpy as np
import pytest
import torch
from torch import nn

from sketchcore.torch import LowRankLinear, SKLinear
from sketchcore.tuner import GridSearch, LayerConfig, SKAutoTuner, SpectralSearch, TuningConfigs
from sketchcore.tuner._candidates import stored


@pytest.fixture
def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 8)).eval()


def rank_of(layer):
    if isinstance(layer, LowRankLinear):
        return layer.rank
    if isinstance(layer, SKLinear):
        return 2 * layer.num_terms * layer.low_rank
    return min(layer.in_features, layer.out_features)


def rank_score(m, cap=4):
    """A synthetic accuracy: 1.0 when every layer keeps rank ≥ cap (as the dense model does), less below."""
    return sum(min(1.0, rank_of(m[i]) / cap) for i in (0, 2)) / 2


def output_score(reference_model, x):
    """A smooth accuracy: 1 − the output's relative error against the dense model (higher rank, higher score)."""
    with torch.no_grad():
        reference = reference_model(x)

    def score(m):
        with torch.no_grad():
            return 1.0 - float(torch.linalg.norm(m(x) - reference) / torch.linalg.norm(reference))
    return score


# -- accuracy values ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value, described", [
    (None, "NoneType None"),
    ((0.9, 0.1), r"tuple \(0.9, 0.1\)"),
    (torch.ones(8), r"a Tensor of shape \(8,\)"),
    (np.array([0.9]), r"a ndarray of shape \(1,\)"),
    (float("nan"), "nan"),
    (float("inf"), "inf"),
    (True, "bool True"),
    ("0.9", "str '0.9'"),
])
def test_an_accuracy_that_is_not_one_finite_number_is_a_value_error(model, value, described):
    for search in (None, GridSearch()):
        tuner = SKAutoTuner(model, LayerConfig("0", {"rank": [2]}), lambda m: value, search, accuracy_threshold=0.5)
        with pytest.raises(ValueError, match=f"SKAutoTuner: accuracy_eval_func: expected a finite real number \\(a "
                                             f"0-d tensor is fine\\), got {described}"):
            tuner.tune()


@pytest.mark.parametrize("value", [torch.tensor(1.0), np.float32(1.0), np.float64(1.0), np.array(1.0), 1,
                                   Fraction(1, 1)])
def test_scalar_accuracies_of_any_kind_are_accepted(model, value):
    tuner = SKAutoTuner(model, LayerConfig("0", {"rank": [2, 4]}), lambda m: value, accuracy_threshold=0.5)
    best = tuner.tune()
    assert best["0"]["params"] == {"rank": 2} and tuner.dense_accuracy == 1.0
    assert all(isinstance(row["accuracy"], float) for row in tuner.history)


def test_an_optimization_value_that_is_not_a_number_is_a_value_error(model):
    tuner = SKAutoTuner(model, LayerConfig("0", {"rank": [2]}), lambda m: 1.0, accuracy_threshold=0.5,
                        optmization_eval_func=lambda m: None)
    with pytest.raises(ValueError, match="SKAutoTuner: optmization_eval_func: expected a finite real number"):
        tuner.tune()


# -- the threshold's scale ------------------------------------------------------------------------------------
@pytest.mark.parametrize("threshold, score", [(0.9, 97.2), (90, 0.97), (0.5, 8.0)])
def test_a_threshold_on_another_scale_than_the_scores_warns(model, threshold, score):
    for search in (None, GridSearch()):
        tuner = SKAutoTuner(model, LayerConfig("0", {"rank": [2]}), lambda m: score, search,
                            accuracy_threshold=threshold)
        with pytest.warns(UserWarning, match=f"accuracy_threshold = {threshold:g} and accuracy_eval_func returned "
                                             f"{score:g}: one looks like a fraction and the other like a percentage"):
            tuner.tune()


@pytest.mark.parametrize("threshold, score", [(0.9, 0.95), (90.0, 97.2), (-0.3, -0.1), (1.2, 1.5), (0.0, 0.4)])
def test_a_threshold_on_the_scores_scale_does_not_warn(model, threshold, score):
    tuner = SKAutoTuner(model, LayerConfig("0", {"rank": [2]}), lambda m: score, accuracy_threshold=threshold)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tuner.tune()


# -- what accuracy_threshold means ----------------------------------------------------------------------------
def test_no_threshold_chooses_the_most_accurate_sketched_model(model):
    """Panther's meaning: every selected layer is sketched, with the setting of the highest accuracy."""
    score = output_score(model, torch.randn(64, 32))
    tuner = SKAutoTuner(model, LayerConfig({"type": "Linear"}, "auto"), score)
    best = tuner.tune()
    assert all(entry["params"] is not None for entry in best.values())
    sketched = [row for row in tuner.history if row["stage"] != "dense"]
    assert tuner.final_accuracy == max(row["accuracy"] for row in sketched)
    tuned = tuner.apply_best_params()
    assert isinstance(tuned[0], LowRankLinear) and isinstance(tuned[2], LowRankLinear)
    assert score(tuned) == tuner.final_accuracy
    # the most accurate settings by the spectrum are the largest ranks that still save numbers
    assert (tuned[0].rank, tuned[2].rank) == (15, 6)
    for rows in tuner.results.values():
        assert all(row["score"] == row["accuracy"] and row["speed"] is None for row in rows)


def test_no_threshold_and_equal_accuracies_choose_the_smallest(model):
    tuner = SKAutoTuner(model, LayerConfig({"type": "Linear"}, "auto"), lambda m: 1.0)
    best = tuner.tune()
    assert {name: entry["params"] for name, entry in best.items()} == {"0": {"rank": 1}, "2": {"rank": 1}}


def test_no_threshold_in_the_black_box_maximises_accuracy(model):
    score = output_score(model, torch.randn(64, 32))
    tuner = SKAutoTuner(model, LayerConfig({"type": "Linear"}, {"rank": [2, 4, 6]}), score, GridSearch())
    best = tuner.tune()
    assert best["0"]["params"] == best["2"]["params"] == {"rank": 6}
    for rows in tuner.results.values():
        assert [row["score"] for row in rows] == [row["accuracy"] for row in rows]


def test_an_optimization_function_without_a_threshold_warns_that_it_is_not_used(model):
    calls = []
    with pytest.warns(UserWarning, match="optmization_eval_func is used only with an accuracy_threshold"):
        tuner = SKAutoTuner(model, LayerConfig("0", {"rank": [2, 4]}), lambda m: 1.0,
                            optmization_eval_func=lambda m: calls.append(1) or 1.0)
    tuner.tune()
    assert calls == []


@pytest.mark.parametrize("search", [None, GridSearch()])
def test_dense_threshold_is_the_dense_models_score(model, search):
    tuner = SKAutoTuner(model, LayerConfig({"type": "Linear"}, {"rank": [2, 4, 8]}), rank_score, search,
                        accuracy_threshold="dense")
    best = tuner.tune()
    assert tuner.dense_accuracy == 1.0 and tuner.history[0]["stage"] == "dense"
    assert best["0"]["params"] == best["2"]["params"] == {"rank": 4}  # the smallest that scores as the dense model
    assert tuner.accuracy_threshold == "dense"


def test_results_rows_carry_accuracy_speed_and_score_with_optuna_and_a_speed_function(model):
    """The black-box loop measured the speed but recorded None and minus the size."""
    pytest.importorskip("optuna")
    from sketchcore.tuner import OptunaSearch
    speeds = iter(range(100, 1000))
    tuner = SKAutoTuner(model, LayerConfig("0", {"rank": [1, 2, 4, 8]}), rank_score, OptunaSearch(n_trials=6, seed=0),
                        accuracy_threshold=1.0, optmization_eval_func=lambda m: float(next(speeds)))
    best = tuner.tune()
    rows = tuner.results["0"]
    assert len(rows) == 6
    for row in rows:
        if row["accuracy"] >= 1.0:
            assert row["speed"] >= 100 and row["score"] == row["speed"]
        else:
            assert row["speed"] is None and row["score"] == float("-inf")
    feasible = [row for row in rows if row["accuracy"] >= 1.0]
    assert best["0"]["params"] == max(feasible, key=lambda r: r["score"])["params"]
    table = tuner.get_results_dataframe()
    assert list(table["speed"].dropna()) == [row["speed"] for row in feasible]


def test_spectral_rows_carry_the_measured_speed(model):
    tuner = SKAutoTuner(model, LayerConfig({"type": "Linear"}, {"rank": [1, 2, 4, 8]}), rank_score,
                        accuracy_threshold=1.0, optmization_eval_func=lambda m: float(1000 - stored(m)))
    best = tuner.tune()
    assert best["0"]["params"] == best["2"]["params"] == {"rank": 4}  # fewest numbers = fastest here
    for rows in tuner.results.values():
        for row in rows:
            if row["accuracy"] >= 1.0:
                assert row["speed"] == row["score"] == 1000 - row["parameters"]
            else:
                assert row["speed"] is None and row["score"] == float("-inf")


# -- params="auto" and explicit spaces ------------------------------------------------------------------------
def test_auto_results_expose_the_layer_class_and_panthers_columns(model):
    tuner = SKAutoTuner(model, LayerConfig({"type": "Linear"}, "auto"), lambda m: 1.0, accuracy_threshold=0.5)
    configs = tuner.getConfigs()
    assert all(config.params != "auto" for config in configs)
    # every saving rank of these small layers (below 16 no rank is rounded), as an explicit list
    assert [(c.layer_names, c.params["rank"]) for c in configs] == [(["0"], list(range(1, 16))),
                                                                    (["2"], list(range(1, 7)))]
    tuner.tune()
    table = tuner.get_results_dataframe()
    assert {"num_terms", "low_rank", "rank", "layer_class"} <= set(table.columns)
    assert set(table[table["rank"].notna()]["layer_class"]) == {"LowRankLinear"}
    assert set(table[table["rank"].isna()]["layer_class"]) == {"Linear"}  # the dense rows
    assert table["num_terms"].isna().all()
    tuner.setConfigs(configs)  # Panther's round trip: the resolved configs are valid configs
    assert [c.layer_names for c in tuner.getConfigs()] == [["0"], ["2"]]


def test_auto_groups_layers_of_one_shape_as_panther(model):
    wide = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32), nn.Linear(32, 8))
    tuner = SKAutoTuner(wide, LayerConfig({"type": "Linear"}, "auto", separate=False), lambda m: 1.0,
                        accuracy_threshold=0.5)
    assert [c.layer_names for c in tuner.getConfigs()] == [["0", "2"], ["3"]]
    best = tuner.tune()
    assert best["0"]["params"] == best["2"]["params"]
    assert set(tuner.results) == {"0_2", "3"}  # a group's rows are keyed by its joined names, as Panther's
    assert set(tuner.get_results_dataframe()["layer_name"]) == {"0_2", "3"}


def test_auto_leaves_a_layer_without_a_saving_setting_dense_with_a_warning():
    tiny = nn.Sequential(nn.Linear(32, 32), nn.Linear(32, 1))
    with pytest.warns(UserWarning, match="layer '1': params='auto' has no setting that stores fewer numbers than the "
                                         "dense layer \\(33\\); it stays dense"):
        tuner = SKAutoTuner(tiny, LayerConfig({"type": "Linear"}, "auto"), lambda m: 1.0)
    assert sorted(tuner.tune()) == ["0"]
    with pytest.warns(UserWarning, match="it stays dense"), pytest.raises(
            ValueError, match="SKAutoTuner: configs: no selected layer has a setting that stores fewer numbers"):
        SKAutoTuner(tiny, LayerConfig("1", "auto"), lambda m: 1.0)


def test_a_space_larger_than_the_dense_layer_is_built_as_panther_does(model):
    """It used to raise; Panther builds it. It warns that it cannot make the layer smaller."""
    params = {"num_terms": [2, 3], "low_rank": [8, 16]}
    with pytest.warns(UserWarning, match="layer '2': every setting of params=.* stores at least as many numbers as "
                                         "the dense layer \\(264\\)"):
        tuner = SKAutoTuner(model, LayerConfig("2", params), lambda m: 1.0, GridSearch())
    best = tuner.tune()
    assert isinstance(best["2"]["best_layer"], SKLinear) and stored(best["2"]["best_layer"]) > 264
    replaced = tuner.replace_without_tuning()[2]
    assert isinstance(replaced, SKLinear) and (replaced.num_terms, replaced.low_rank) == (2, 8)


def test_a_search_with_a_resource_hook_passes_it_to_the_accuracy_function(model):
    """Panther's hyperband hook: a search with get_resource() hands the accuracy function resource=..."""
    class WithResource(GridSearch):
        def get_resource(self):
            return 7

    seen = []
    def accuracy(m, resource=None):
        seen.append(resource)
        return 1.0

    tuner = SKAutoTuner(model, LayerConfig("0", {"rank": [2, 4]}), accuracy, WithResource())
    tuner.tune()
    assert seen[:2] == [7, 7] and len(seen) == 3  # two trials with the resource, then the final model without


def test_max_evaluations_spent_on_the_dense_model_warns(model):
    tuner = SKAutoTuner(model, TuningConfigs([LayerConfig("0", "auto")]), lambda m: 1.0,
                        SpectralSearch(max_evaluations=1))
    with pytest.warns(UserWarning, match="max_evaluations was spent on the dense model"):
        best = tuner.tune()
    assert best["0"]["params"] == {"rank": 15} and tuner.evaluations == 1
