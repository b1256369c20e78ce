"""Files of the tuner: results as a pickle Panther's way (``.pkl``: pickle.load reads it, Panther's
own pickles load) or JSON (other names), anything else refused with the file and the formats
named, pickles read without running their code; search states saved and resumed; OptunaSearch's
Panther extras."""
import dataclasses
import json
import os
import pickle
import sys
import types

import pytest
import torch
from torch import nn

from sketchcore.torch import SKLinear
from sketchcore.tuner import Categorical, GridSearch, Int, LayerConfig, RandomSearch, SKAutoTuner, TuningConfigs


@pytest.fixture
def tuned():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 8)).eval()
    config = [LayerConfig("0", {"rank": [2, 4]}), LayerConfig("2", {"num_terms": [1], "low_rank": [1, 2]})]
    tuner = SKAutoTuner(model, config, lambda m: 1.0, accuracy_threshold=0.5)
    tuner.tune()
    return model, config, tuner


def outputs(model):
    with torch.no_grad():
        return model(torch.ones(3, 32))


def test_pkl_is_a_pickle_of_panthers_layout_and_loads_back(tuned, tmp_path):
    model, config, tuner = tuned
    path = tmp_path / "runs" / "best_config.pkl"
    tuner.save_tuning_results(path)
    with open(path, "rb") as f:
        data = pickle.load(f)
    assert {"results", "best_params", "config"} <= set(data) and isinstance(data["config"], TuningConfigs)
    assert isinstance(data["best_params"]["2"]["best_layer"], SKLinear)
    assert data["best_params"]["0"]["params"] == {"rank": 2} and data["results"] == tuner.results
    fresh = SKAutoTuner(nn.Sequential(*[m for m in model]), config, lambda m: 1.0)
    fresh.load_tuning_results(path)
    assert fresh.evaluations == tuner.evaluations and fresh.history == tuner.history
    for name in ("0", "2"):
        saved, loaded = tuner.best_params[name]["best_layer"].state_dict(), fresh.best_params[name]["best_layer"]
        assert all(torch.equal(saved[key], value) for key, value in loaded.state_dict().items())
    expected = outputs(tuner.apply_best_params())
    assert torch.equal(outputs(fresh.apply_best_params()), expected)


def test_other_names_are_json_without_modules(tuned, tmp_path):
    _, _, tuner = tuned
    tuner.save_tuning_results(tmp_path / "results.json")
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["format"] == "sketchcore.tuner/1" and "best_layer" not in data["best_params"]["0"]
    assert data["best_params"]["2"]["params"] == {"num_terms": 1, "low_rank": 1}


@pytest.mark.parametrize("content, reason", [
    (b"\x00\x01\xffbinary", "UnicodeDecodeError"),
    (b"results: {}", "JSONDecodeError"),
])
def test_a_file_that_is_neither_names_the_file_and_the_formats(tuned, tmp_path, content, reason):
    _, _, tuner = tuned
    path = tmp_path / "best_config.dat"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=f"load_tuning_results: '.*best_config.dat': expected a pickle \\(what "
                                         f"save_tuning_results writes for .pkl/.pickle names, and what Panther "
                                         f"writes\\) or JSON \\(what it writes for any other name\\), got neither "
                                         f"\\({reason}"):
        tuner.load_tuning_results(path)


def test_a_pickle_is_read_without_running_its_code(tuned, tmp_path):
    _, _, tuner = tuned
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    path = tmp_path / "evil.pkl"
    path.write_bytes(pickle.dumps({"results": {}, "best_params": {}, "x": Payload()}))
    with pytest.raises(ValueError, match="it is a pickle that could not be read \\(UnpicklingError: the pickle refers "
                                         "to (posix|os).system, which is neither a tensor nor a class"):
        tuner.load_tuning_results(path)
    assert not marker.exists()
    path.write_bytes(pickle.dumps([1, 2]))
    with pytest.raises(ValueError, match="expected tuning results \\(a dict with 'results' and 'best_params'\\)"):
        tuner.load_tuning_results(path)


@pytest.fixture
def fake_panther(monkeypatch):
    """Panther's classes under Panther's module names, as its pickles name them (written here from its
    public layout: SKLinear keeps S1s, S2s, bias and the fixed U1s, U2s; the configs are plain classes)."""
    modules = {}
    for name in ("panther", "panther.nn", "panther.nn.linear", "panther.tuner", "panther.tuner.SkAutoTuner",
                 "panther.tuner.SkAutoTuner.Configs", "panther.tuner.SkAutoTuner.Configs.LayerConfig",
                 "panther.tuner.SkAutoTuner.Configs.TuningConfigs", "panther.tuner.SkAutoTuner.Configs.ParamSpec"):
        modules[name] = types.ModuleType(name)
        monkeypatch.setitem(sys.modules, name, modules[name])

    class PantherSKLinear(nn.Module):
        def __init__(self, ours):
            super().__init__()
            for key in ("S1s", "S2s", "bias"):
                setattr(self, key, nn.Parameter(getattr(ours, key).detach().clone()))
            for key in ("U1s", "U2s"):
                self.register_buffer(key, getattr(ours, key).clone())

    class PantherLayerConfig:
        def __init__(self, layer_names, params):
            self.layer_names, self.params, self.separate, self.copy_weights = layer_names, params, True, True

    class PantherTuningConfigs:
        def __init__(self, configs):
            self.configs = configs

    @dataclasses.dataclass
    class PantherInt:
        low: int
        high: int
        step: int = 1
        log: bool = False

    for cls, module, name in ((PantherSKLinear, "panther.nn.linear", "SKLinear"),
                              (PantherLayerConfig, "panther.tuner.SkAutoTuner.Configs.LayerConfig", "LayerConfig"),
                              (PantherTuningConfigs, "panther.tuner.SkAutoTuner.Configs.TuningConfigs",
                               "TuningConfigs"),
                              (PantherInt, "panther.tuner.SkAutoTuner.Configs.ParamSpec", "Int")):
        cls.__module__, cls.__qualname__, cls.__name__ = module, name, name
        setattr(modules[module], name, cls)
    return PantherSKLinear, PantherLayerConfig, PantherTuningConfigs, PantherInt


def panther_pickle(fake, layer, params):
    PantherSKLinear, PantherLayerConfig, PantherTuningConfigs, PantherInt = fake
    data = {"results": {"2": [{"params": params, "score": 0.9, "accuracy": 0.9, "speed": None}]},
            "best_params": {"2": {"params": params, "copy_weights": True, "best_layer": PantherSKLinear(layer)}},
            "config": PantherTuningConfigs([PantherLayerConfig(["2"], {"num_terms": [1, 2],
                                                                        "low_rank": PantherInt(1, 4)})])}
    return pickle.dumps(data)


def test_panthers_pickle_loads_with_its_layers_tensors(tuned, tmp_path, fake_panther, monkeypatch):
    model, config, _ = tuned
    torch.manual_seed(5)
    panthers_layer = SKLinear(32, 8, num_terms=2, low_rank=3)  # the tensors Panther's tuner chose
    blob = panther_pickle(fake_panther, panthers_layer, {"num_terms": 2, "low_rank": 3})
    for name in [n for n in sys.modules if n == "panther" or n.startswith("panther.")]:
        monkeypatch.delitem(sys.modules, name)  # Panther is not installed where the file is read
    path = tmp_path / "best_config.pkl"
    path.write_bytes(blob)
    tuner = SKAutoTuner(model, config, lambda m: 1.0)
    tuner.load_tuning_results(path)
    layer = tuner.best_params["2"]["best_layer"]
    assert isinstance(layer, SKLinear) and (layer.num_terms, layer.low_rank) == (2, 3)
    for key, value in panthers_layer.state_dict().items():
        assert torch.equal(layer.state_dict()[key], value), key
    assert tuner.get_results_dataframe()["accuracy"].tolist() == [0.9]
    assert torch.equal(outputs(tuner.apply_best_params()[2:]), outputs(panthers_layer))


def test_panthers_layer_tensors_that_do_not_fit_warn_and_the_layer_is_rebuilt(tuned, tmp_path, fake_panther):
    model, config, _ = tuned
    wrong = SKLinear(16, 8, num_terms=1, low_rank=2)  # another layer's shape
    path = tmp_path / "best_config.pkl"
    path.write_bytes(panther_pickle(fake_panther, wrong, {"num_terms": 1, "low_rank": 2}))
    tuner = SKAutoTuner(model, config, lambda m: 1.0)
    with pytest.warns(UserWarning, match="layer '2': the saved layer's tensors do not fit SKLinear .*kept the layer "
                                         "rebuilt from params"):
        tuner.load_tuning_results(path)
    assert tuner.best_params["2"]["best_layer"].S1s.shape == (1, 32, 2)


# -- search states --------------------------------------------------------------------------------------------
def drain(search, count=None):
    out = []
    while (count is None or len(out) < count) and (params := search.get_next_params()) is not None:
        search.update(params, float(len(out)))
        out.append(params)
    return out


@pytest.mark.parametrize("make", [GridSearch, lambda: RandomSearch(n_trials=6, seed=3)])
def test_a_saved_search_resumes_where_it_stood(make, tmp_path):
    space = {"rank": Int(1, 4), "kind": Categorical(["a", "b"])}
    whole = make()
    whole.initialize(space)
    expected = drain(whole)
    first = make()
    first.initialize(space)
    head = drain(first, 3)
    first.save_state(tmp_path / "state.pkl")
    resumed = make()
    resumed.load_state(tmp_path / "state.pkl")
    assert head + drain(resumed) == expected and resumed.is_finished()
    assert len(resumed.history) == len(expected)


def test_load_state_refuses_another_searchs_state(tmp_path):
    grid = GridSearch()
    grid.initialize({"rank": [1]})
    grid.save_state(tmp_path / "grid.pkl")
    with pytest.raises(ValueError, match="RandomSearch.load_state: '.*grid.pkl': expected a state saved by "
                                         "RandomSearch.save_state, got a state of GridSearch"):
        RandomSearch().load_state(tmp_path / "grid.pkl")
    (tmp_path / "junk.pkl").write_bytes(b"\x80\x04junk")
    with pytest.raises(ValueError, match="GridSearch.load_state: .*got an unreadable file"):
        GridSearch().load_state(tmp_path / "junk.pkl")


# -- OptunaSearch's Panther extras ----------------------------------------------------------------------------
@pytest.fixture
def optuna():
    return pytest.importorskip("optuna")


def test_optuna_search_order_of_calls(optuna):
    from sketchcore.tuner import OptunaSearch
    search = OptunaSearch(n_trials=2)
    with pytest.raises(RuntimeError, match="OptunaSearch.get_next_params: the search is not initialized"):
        search.get_next_params()
    assert search.study is None and search.get_trials_dataframe() is None and search.should_prune() is False
    search.initialize({"rank": [1, 2]})
    with pytest.raises(RuntimeError, match="OptunaSearch.update: no pending trial; call get_next_params\\(\\) first"):
        search.update({"rank": 1}, 1.0)


def test_grid_sampler_walks_the_grid_once_and_stops(optuna):
    from sketchcore.tuner import OptunaSearch
    model = nn.Sequential(nn.Linear(32, 32))
    space = {"num_terms": [1, 2], "low_rank": [2, 4, 8]}
    tuner = SKAutoTuner(model, LayerConfig("0", {"num_terms": [1, 2, 3], "low_rank": Int(2, 16, step=2)}),
                        lambda m: 1.0, OptunaSearch(sampler=optuna.samplers.GridSampler(space)))
    tuner.tune()
    trials = tuner.search_algorithm.study.trials
    assert len(trials) == 6 and {(t.params["num_terms"], t.params["low_rank"]) for t in trials} == {
        (t, k) for t in (1, 2) for k in (2, 4, 8)}


def test_one_study_per_tuned_layer_in_a_storage(optuna, tmp_path):
    from sketchcore.tuner import OptunaSearch
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    model = nn.Sequential(nn.Linear(32, 32), nn.Linear(32, 32), nn.Linear(32, 32))
    search = OptunaSearch(n_trials=2, study_name="run", storage=storage, seed=0)
    SKAutoTuner(model, LayerConfig({"type": "Linear"}, {"rank": [2, 4]}), lambda m: 1.0, search).tune()
    assert sorted(optuna.get_all_study_names(storage)) == ["run", "run_1", "run_2"]
    assert [s.study_name for s in search.studies] == ["run", "run_1", "run_2"] and search.study is search.studies[-1]
    resumed = OptunaSearch(n_trials=2, study_name="run", storage=storage, seed=0, load_if_exists=True)
    resumed.initialize({"rank": [2, 4]})
    assert len(resumed.study.trials) == 2  # the first layer's study, resumed


def test_optuna_trial_hooks_and_state(optuna, tmp_path):
    from sketchcore.tuner import OptunaSearch
    search = OptunaSearch(n_trials=3, seed=0, sampler=optuna.samplers.RandomSampler(seed=0))
    search.initialize({"rank": Int(1, 8)})
    params = search.get_next_params()
    search.set_user_attr("layer", "fc1")
    search.report_intermediate(0.25, step=0)
    assert search.should_prune() is False  # the default pruner needs more trials
    search.update(params, 0.25)
    assert search.study.trials[0].user_attrs == {"layer": "fc1"}
    assert search.study.trials[0].intermediate_values == {0: 0.25}
    search.save_state(tmp_path / "optuna.pkl")
    resumed = OptunaSearch()
    resumed.load_state(tmp_path / "optuna.pkl")
    assert (resumed.n_trials, resumed.get_best_score(), resumed.get_best_params()) == (3, 0.25, params)
    assert len(drain(resumed)) == 2  # the trial count goes on: 1 of 3 was asked before saving
    assert len(resumed.study.trials) == 2  # in memory, the study's trials were not in the file (as in Panther)
