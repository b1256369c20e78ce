"""Panther's tuner API surface in sketchcore: the module layout (panther.tuner.SkAutoTuner,
.Configs, .Searching, .Visualizer), every public method and attribute of Panther's SKAutoTuner,
searches and config classes, and ModelVisualizer."""
import importlib
import sys

import pytest
import torch
from torch import nn

import sketchcore.tuner as tuner_package
from sketchcore.torch import LowRankLinear, SKConv2d
from sketchcore.tuner import (Categorical, Float, GridSearch, Int, LayerConfig, LayerNameResolver, ModelVisualizer,
                              ParamsResolver, RandomSearch, SKAutoTuner, SearchAlgorithm, SpectralSearch,
                              TuningConfigs)

# module path → names Panther's module of that path exports (its layout, read from Panther's sources)
PANTHER_LAYOUT = {
    "sketchcore.tuner": ["SKAutoTuner", "LayerConfig", "TuningConfigs", "Categorical", "Int", "Float",
                         "SearchAlgorithm", "OptunaSearch", "ModelVisualizer"],
    "sketchcore.tuner.SkAutoTuner": ["SKAutoTuner", "LayerConfig", "TuningConfigs", "Categorical", "Int", "Float",
                                     "SearchAlgorithm", "OptunaSearch", "ModelVisualizer"],
    "sketchcore.tuner.SkAutoTuner.SKAutoTuner": ["SKAutoTuner"],
    "sketchcore.tuner.SkAutoTuner.layer_type_mapping": ["LAYER_TYPE_MAPPING", "get_sketched_class"],
    "sketchcore.tuner.SkAutoTuner.Configs": ["LayerConfig", "TuningConfigs", "LayerNameResolver", "ParamsResolver",
                                             "Categorical", "Int", "Float", "ParamSpec"],
    "sketchcore.tuner.SkAutoTuner.Configs.LayerConfig": ["LayerConfig"],
    "sketchcore.tuner.SkAutoTuner.Configs.TuningConfigs": ["TuningConfigs"],
    "sketchcore.tuner.SkAutoTuner.Configs.ParamSpec": ["Categorical", "Int", "Float", "ParamSpec", "get_param_choices",
                                                       "is_param_spec", "to_categorical"],
    "sketchcore.tuner.SkAutoTuner.Configs.ParamsResolver": ["ParamsResolver"],
    "sketchcore.tuner.SkAutoTuner.Configs.LayerNameResolver": ["LayerNameResolver"],
    "sketchcore.tuner.SkAutoTuner.Searching": ["SearchAlgorithm", "OptunaSearch"],
    "sketchcore.tuner.SkAutoTuner.Searching.SearchAlgorithm": ["SearchAlgorithm"],
    "sketchcore.tuner.SkAutoTuner.Searching.OptunaSearch": ["OptunaSearch"],
    "sketchcore.tuner.SkAutoTuner.Visualizer": ["ModelVisualizer"],
    "sketchcore.tuner.SkAutoTuner.Visualizer.ModelVisualizer": ["ModelVisualizer"],
}


@pytest.mark.parametrize("path", sorted(PANTHER_LAYOUT))
def test_panthers_module_layout_imports_the_sketchcore_objects(path):
    module = importlib.import_module(path)
    for name in PANTHER_LAYOUT[path]:
        found = getattr(module, name)
        if hasattr(tuner_package, name):
            assert found is getattr(tuner_package, name), (path, name)
    assert set(PANTHER_LAYOUT[path]) <= set(getattr(module, "__all__", PANTHER_LAYOUT[path]))


def test_from_imports_of_panthers_layout():
    from sketchcore.tuner.SkAutoTuner import SKAutoTuner as Tuner
    from sketchcore.tuner.SkAutoTuner.Configs import Categorical as C, Int as I
    from sketchcore.tuner.SkAutoTuner.Searching import OptunaSearch
    from sketchcore.tuner.SkAutoTuner.Visualizer import ModelVisualizer as V
    assert (Tuner, C, I, V, OptunaSearch) == (SKAutoTuner, Categorical, Int, ModelVisualizer,
                                             tuner_package.OptunaSearch)


# Panther's public members, per class (from its sources): each must exist here with the same name.
TUNER_METHODS = ["tune", "apply_best_params", "replace_without_tuning", "get_results_dataframe", "get_best_params",
                 "save_tuning_results", "load_tuning_results", "getResolver", "getConfigs", "setConfigs"]
TUNER_ATTRIBUTES = ["model", "accuracy_eval_func", "search_algorithm", "verbose", "num_runs_per_param",
                    "accuracy_threshold", "optmization_eval_func", "results", "best_params", "layer_map", "resolver",
                    "paramsResolver", "configs"]
SEARCH_METHODS = ["initialize", "get_next_params", "update", "save_state", "load_state", "get_best_params",
                  "get_best_score", "reset", "is_finished"]
OPTUNA_MEMBERS = ["study", "get_trials_dataframe", "set_user_attr", "report_intermediate", "should_prune", "n_trials",
                  "direction", "study_name", "storage", "load_if_exists", "seed", "sampler"]


def test_every_public_member_of_panthers_tuner_exists():
    model = nn.Sequential(nn.Linear(16, 16))
    tuner = SKAutoTuner(model, TuningConfigs([LayerConfig("0", {"rank": [2]})]), lambda m: 1.0)
    for name in TUNER_METHODS:
        assert callable(getattr(tuner, name)), name
    for name in TUNER_ATTRIBUTES:
        assert hasattr(tuner, name), name
    assert isinstance(tuner.getResolver(), LayerNameResolver) and isinstance(tuner.paramsResolver, ParamsResolver)
    assert tuner.layer_map == {"0": model[0]} and tuner.getConfigs() is tuner.configs


@pytest.mark.parametrize("search", [GridSearch(), RandomSearch(), SearchAlgorithm()])
def test_every_method_of_panthers_search_interface_exists(search):
    for name in SEARCH_METHODS:
        assert callable(getattr(search, name)), name


def test_every_member_of_panthers_optuna_search_exists():
    pytest.importorskip("optuna")
    search = tuner_package.OptunaSearch(n_trials=2, seed=1)
    search.initialize({"rank": [2, 4]})
    for name in OPTUNA_MEMBERS:
        assert hasattr(search, name), name
    for name in SEARCH_METHODS:
        assert callable(getattr(search, name)), name


def test_config_classes_keep_panthers_members():
    config = LayerConfig(["a"], {"num_terms": [1]}, separate=False, copy_weights=False)
    assert (config.layer_names, config.params, config.separate, config.copy_weights) == (["a"], {"num_terms": [1]},
                                                                                          False, False)
    assert config.clone() == config and config.clone() is not config
    configs = TuningConfigs([config])
    assert configs.configs == [config] and len(configs) == 1 and configs[0] is config and list(configs) == [config]
    for name in ("add", "remove", "replace", "clone", "merge", "filter", "map"):
        assert callable(getattr(configs, name))


def test_panthers_param_spec_helpers():
    from sketchcore.tuner.SkAutoTuner.Configs.ParamSpec import get_param_choices, is_param_spec, to_categorical
    assert get_param_choices([3, 1]) == [3, 1] and get_param_choices(Categorical([2])) == [2]
    assert get_param_choices(Int(1, 10**6)) is None and get_param_choices(Float(0.1, 0.5, step=0.2)) == pytest.approx(
        [0.1, 0.3, 0.5])
    assert get_param_choices(Float(0.0, 1.0)) is None and get_param_choices({1: 2}) is None
    assert is_param_spec(Float(0.0, 1.0)) and not is_param_spec("x")
    assert to_categorical([1, 2]) == Categorical([1, 2])
    with pytest.raises(TypeError, match="to_categorical: value: expected a list or a Categorical, got tuple"):
        to_categorical((1, 2))


def test_layer_type_mapping_names_panthers_keys():
    from sketchcore.tuner.SkAutoTuner.layer_type_mapping import LAYER_TYPE_MAPPING, get_sketched_class
    for dense, entry in LAYER_TYPE_MAPPING.items():
        assert entry["class_path"] == f"sketchcore.torch.{entry['class'].__name__}"
        assert get_sketched_class(dense) is entry["class"]
        assert entry["params"] == (["num_random_features", "kernel_fn"] if dense is nn.MultiheadAttention
                                   else ["num_terms", "low_rank"])
    with pytest.raises(ValueError, match="get_sketched_class: layer_type: expected one of"):
        get_sketched_class(nn.ReLU)


def test_resolvers_as_panther_uses_them():
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32), nn.Conv2d(3, 8, 3))
    resolver = LayerNameResolver(model)
    assert resolver.model is model and list(resolver.layer_map) == ["0", "1", "2", "3"]
    assert resolver.resolve({"type": ["Linear", "Conv2d"], "range": [0, 3, 2]}) == ["0", "3"]
    params = ParamsResolver(model, verbose=True)
    resolved = params.resolve(LayerConfig({"type": ["Linear", "Conv2d"]}, "auto"))
    assert [c.layer_names for c in resolved] == [["0", "2"], ["3"]]
    assert resolved[1].params["num_terms"] == [1] and max(resolved[1].params["low_rank"]) >= 1
    assert params.resolve(LayerConfig("0", {"rank": [4]}))[0].params == {"rank": [4]}
    with pytest.raises(ValueError, match="params: expected keys among"):
        params.resolve(LayerConfig("0", {"width": [4]}))
    with pytest.raises(TypeError, match="layer '1': expected one of"):
        params.resolve(LayerConfig("1", "auto"))


def test_spectral_search_has_no_study_and_says_what_to_use():
    with pytest.raises(AttributeError, match="SpectralSearch has no Optuna study: pass search_algorithm=OptunaSearch"):
        SpectralSearch().study
    assert not hasattr(SpectralSearch(), "study")


# -- ModelVisualizer --------------------------------------------------------------------------------------------
def test_model_visualizer_shows_the_tree_and_what_was_replaced(capsys):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3), nn.Sequential(nn.Linear(64, 64), nn.ReLU()), nn.Linear(64, 4))
    tuner = SKAutoTuner(model, LayerConfig(["1.0", "0"], "auto"), lambda m: 1.0, accuracy_threshold=0.5)
    tuner.tune()
    tuner.apply_best_params()
    ModelVisualizer.print_module_tree(model, root_name="net")
    lines = capsys.readouterr().out.splitlines()
    total = sum(p.numel() for p in model.parameters())
    assert lines[0].startswith("net (Sequential)/") and f"{total:,} params" in lines[0]
    assert lines[1].startswith("├─ 0 (SKConv2d)  3→16, kernel 3×3, num_terms=1, low_rank=1 ·")
    assert lines[1].endswith("[sketched]") and "buffers" in lines[1]  # SKConv2d keeps its fixed sketch as a buffer
    # LowRankLinear at the smallest rank of the "auto" grid, 16 (ranks the GPU kernels like): S, U, bias
    assert lines[2] == f"├─ 1 (Sequential)/  {16 * (64 + 64) + 64:,} params"
    assert lines[3].startswith("│  ├─ 0 (LowRankLinear)  64→64, rank=16 ·") and lines[3].endswith("[sketched]")
    assert lines[4] == "│  └─ 1 (ReLU)"
    assert lines[5] == "└─ 2 (Linear)  64→4 · 260 params"
    assert ModelVisualizer.module_tree(model, max_depth=0) == lines[0].replace("net", "model", 1)


def test_model_visualizer_figure():
    pytest.importorskip("matplotlib")
    model = nn.Sequential(nn.Linear(8, 8), LowRankLinear(8, 8, rank=2), nn.ReLU())
    figure = ModelVisualizer.plot_module_tree(model)
    axes = figure.axes[0]
    assert [t.get_text().split("  ")[0] for t in axes.texts] == ["model (Sequential)/", "├─ 0 (Linear)",
                                                                 "├─ 1 (LowRankLinear)", "└─ 2 (ReLU)"]
    bars = axes.patches  # one bar per module storing numbers itself: the two layers
    assert len(bars) == 2 and bars[0].get_width() > bars[1].get_width()
    assert bars[1].get_facecolor() != bars[0].get_facecolor()  # sketched and dense layers in two colors


def test_model_visualizer_errors(monkeypatch):
    with pytest.raises(TypeError, match="ModelVisualizer: model: expected a torch.nn.Module, got dict"):
        ModelVisualizer.print_module_tree({"0.weight": torch.zeros(2)})
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match="plot_module_tree needs matplotlib.*pip install matplotlib"):
        ModelVisualizer.plot_module_tree(nn.Linear(2, 2))


def test_sketched_conv_in_the_tree_comes_from_the_tuner():
    """What the visualizer marks is what the tuner installed (the classes of LAYER_TYPE_MAPPING)."""
    model = nn.Sequential(nn.Conv2d(3, 16, 3))
    tuner = SKAutoTuner(model, LayerConfig("0", "auto"), lambda m: 1.0, accuracy_threshold=0.5)
    tuner.tune()
    assert isinstance(tuner.apply_best_params()[0], SKConv2d)
    assert "(SKConv2d)" in ModelVisualizer.module_tree(model)
