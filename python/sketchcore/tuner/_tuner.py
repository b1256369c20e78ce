"""``SKAutoTuner``: Panther's auto-tuner, call for call, with a search that needs far fewer
evaluations (see ``_spectral``)."""
from __future__ import annotations

import os
import warnings
from typing import Any, Callable, Optional, Sequence, Union

from torch import nn

from sketchcore.torch._common import positive_int
from sketchcore.tuner import _results_file
from sketchcore.tuner._black_box import black_box
from sketchcore.tuner._configs import LayerConfig, TuningConfigs
from sketchcore.tuner._evaluation import Evaluator, built, set_module
from sketchcore.tuner._gram import capture
from sketchcore.tuner._resolvers import LayerNameResolver, ParamsResolver
from sketchcore.tuner._results import ResultsLog, table_rows
from sketchcore.tuner._scores import DENSE, Threshold, check_threshold
from sketchcore.tuner._spectral import Assignment, SpectralSearch
from sketchcore.tuner._spectral_driver import spectral
from sketchcore.tuner._units import units_of

EvalFunc = Callable[..., Any]


def _check_callable(value: object, name: str) -> None:
    if not callable(value):
        raise TypeError(f"SKAutoTuner: {name}: expected a callable, got {type(value).__name__}")


class SKAutoTuner:
    """Chooses sketched replacements for a model's layers (Panther's ``SKAutoTuner`` API). The
    model changes only in :meth:`apply_best_params` and :meth:`replace_without_tuning`.

    Parameters
    ----------
    model : torch.nn.Module
        The trained model (``nn.Linear``, ``nn.Conv2d``, ``nn.MultiheadAttention`` selectable).
    configs : TuningConfigs, LayerConfig or list of LayerConfig
        Which layers and which search spaces; each layer in one config only.
    accuracy_eval_func : callable
        ``model → score``, higher is better: one finite real number (a 0-d tensor is fine).
    search_algorithm : SpectralSearch or SearchAlgorithm, optional
        Default ``SpectralSearch()`` (error curves from each layer's spectrum); a Panther-style
        :class:`SearchAlgorithm` runs Panther's black-box loop (each unit tuned, others dense).
    verbose : bool, default False
        Print a line per evaluation.
    accuracy_threshold : float, "dense" or None, default None
        None (Panther's default): the most accurate model, every selected layer replaced; a
        number: the smallest model (fewest stored numbers) scoring ≥ it; ``"dense"``: the dense
        model's own score as the threshold.
    optmization_eval_func, optimization_eval_func : callable, optional
        ``model → value`` to maximize among the models meeting a threshold (at most one
        spelling; without a threshold it is not used, and a warning says so).
    num_runs_per_param : int, default 1
        Calls of ``accuracy_eval_func`` averaged per evaluation, ≥ 1.

    Attributes
    ----------
    layer_map : dict
        Every named submodule of the model, by name, as when the tuner was made.
    resolver, paramsResolver : LayerNameResolver, ParamsResolver
        Resolve the selectors, and ``params`` (``"auto"`` included) into explicit spaces.
    results : dict
        Per layer (or ``"_"``-joined group), one row per evaluation: ``params``,
        ``layer_class``, ``score``, ``accuracy``, ``speed``, ``parameters``, ``evaluation``.
    best_params : dict
        Layer name → ``{"params", "copy_weights", "best_layer"}`` (Panther's format).
    history : list of dict
        Per evaluation: ``evaluation``, ``stage``, ``accuracy``, ``parameters``, ``layers``,
        ``meets_threshold``.
    evaluations : int
        Calls of ``accuracy_eval_func`` made by the last :meth:`tune`.
    dense_accuracy, final_accuracy : float or None
        The dense model's score (where measured) and the chosen model's.
    best_assignment_size : int or None
        Numbers the chosen model stores.

    Raises
    ------
    TypeError
        ``"SKAutoTuner: <argument>: expected ..., got ..."`` for a wrong type, or ``"SKAutoTuner:
        layer '...': expected one of ['Linear', 'Conv2d', 'MultiheadAttention'], got ..."``.
    ValueError
        Both spellings of the optimization function, ``num_runs_per_param`` < 1, a string
        threshold other than ``"dense"``, a layer selected by two configs, no config, a selector
        matching no layer, or ``params`` a layer does not accept.

    Examples
    --------
    An accuracy function that is always 1.0 lets every layer shrink to its smallest setting:

    >>> import torch
    >>> from torch import nn
    >>> from sketchcore.tuner import LayerConfig, SKAutoTuner
    >>> _ = torch.manual_seed(0)
    >>> model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
    >>> tuner = SKAutoTuner(model, LayerConfig({"type": "Linear"}), lambda m: 1.0, accuracy_threshold=0.5)
    >>> best = tuner.tune()
    >>> {name: choice["params"] for name, choice in best.items()}
    {'0': {'rank': 16}, '2': {'rank': 1}}
    >>> tuner.apply_best_params()[0]
    LowRankLinear(in_features=64, out_features=64, rank=16, bias=True, activation='none')
    """

    def __init__(self, model: nn.Module, configs: Union[TuningConfigs, LayerConfig, Sequence[LayerConfig]],
                 accuracy_eval_func: EvalFunc, search_algorithm: Any = None, verbose: bool = False,
                 accuracy_threshold: Union[float, str, None] = None, optmization_eval_func: Optional[EvalFunc] = None,
                 num_runs_per_param: int = 1, *, optimization_eval_func: Optional[EvalFunc] = None) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"SKAutoTuner: model: expected a torch.nn.Module, got {type(model).__name__}")
        if isinstance(configs, LayerConfig):
            configs = TuningConfigs([configs])
        elif not isinstance(configs, TuningConfigs):
            if not isinstance(configs, Sequence):
                raise TypeError(f"SKAutoTuner: configs: expected a TuningConfigs, a LayerConfig or a list of them, "
                                f"got {type(configs).__name__}")
            configs = TuningConfigs(list(configs))
        _check_callable(accuracy_eval_func, "accuracy_eval_func")
        if optmization_eval_func is not None and optimization_eval_func is not None:
            raise ValueError("SKAutoTuner: optimization_eval_func: expected it or its Panther spelling "
                             "optmization_eval_func, got both")
        optimize = optimization_eval_func if optimization_eval_func is not None else optmization_eval_func
        if optimize is not None:
            _check_callable(optimize, "optmization_eval_func")
        if search_algorithm is None:
            search_algorithm = SpectralSearch()
        elif not isinstance(search_algorithm, SpectralSearch) and not all(
                hasattr(search_algorithm, m) for m in ("initialize", "get_next_params", "update")):
            raise TypeError(f"SKAutoTuner: search_algorithm: expected a SpectralSearch or a SearchAlgorithm "
                            f"(initialize/get_next_params/update), got {type(search_algorithm).__name__}")
        threshold: Threshold = check_threshold(accuracy_threshold)
        positive_int(num_runs_per_param, "num_runs_per_param", "SKAutoTuner")
        if optimize is not None and threshold is None:
            warnings.warn("SKAutoTuner: optmization_eval_func is used only with an accuracy_threshold (Panther's "
                          "rule); with accuracy_threshold=None the most accurate setting is chosen and it is never "
                          "called", UserWarning, stacklevel=2)
        self.model, self.accuracy_eval_func, self.search_algorithm = model, accuracy_eval_func, search_algorithm
        self.verbose, self.accuracy_threshold = bool(verbose), threshold
        self.optmization_eval_func = self.optimization_eval_func = optimize
        self.num_runs_per_param = num_runs_per_param
        self.layer_map = {name: module for name, module in model.named_modules() if name}
        self.resolver = LayerNameResolver(model, self.layer_map)
        self.paramsResolver = ParamsResolver(model, self.layer_map, verbose=self.verbose)  # noqa: N815 - Panther's
        self.configs = self._resolve(configs)
        self.results: dict[str, list[dict[str, Any]]] = {}
        self.best_params: dict[str, dict[str, Any]] = {}
        self.history: list[dict[str, Any]] = []
        self.evaluations = 0
        self.dense_accuracy: Optional[float] = None
        self.final_accuracy: Optional[float] = None
        self.best_assignment_size: Optional[int] = None

    # -- configuration ---------------------------------------------------------------------
    def _resolve(self, configs: TuningConfigs) -> TuningConfigs:
        resolved: list[LayerConfig] = []
        seen: dict[str, int] = {}
        if len(configs) == 0:
            raise ValueError("SKAutoTuner: configs: expected at least one LayerConfig, got none")
        for index, config in enumerate(configs):
            names = self.resolver.resolve(config.layer_names)
            for name in names:
                if name in seen:
                    raise ValueError(f"SKAutoTuner: configs: layer {name!r} is selected by configs[{seen[name]}] and "
                                     f"configs[{index}]; expected each layer in one config")
                seen[name] = index
            given = LayerConfig._resolved(names, config.params, config.separate, config.copy_weights, config._auto)
            resolved.extend(self.paramsResolver.resolve(given))
        if not resolved:
            raise ValueError("SKAutoTuner: configs: no selected layer has a setting that stores fewer numbers than it "
                             "does (see the warnings); expected at least one layer to tune")
        return TuningConfigs(resolved)

    def getConfigs(self) -> TuningConfigs:  # noqa: N802 - Panther's name
        """The configs, every selector resolved to layer names and ``params="auto"`` to the
        explicit space it searches (one config per group of same-type, same-shape layers)."""
        return self.configs

    def setConfigs(self, configs: TuningConfigs) -> None:  # noqa: N802 - Panther's name
        """Replaces the configs for the next :meth:`tune` (the constructor's errors)."""
        self.configs = self._resolve(configs)

    def getResolver(self) -> LayerNameResolver:  # noqa: N802 - Panther's name
        """The :class:`LayerNameResolver` of the tuner's layer selectors."""
        return self.resolver

    # -- tuning ----------------------------------------------------------------------------
    def tune(self) -> dict[str, dict[str, Any]]:
        """Searches and returns ``best_params`` (a None ``"params"``: keep dense), filling in the
        attributes above; the model is left dense. A first score that looks like a fraction
        against a percentage threshold (or the reverse) warns.

        Raises
        ------
        ValueError
            ``"SKAutoTuner: accuracy_eval_func: expected a finite real number (a 0-d tensor is
            fine), got ..."`` (likewise ``optmization_eval_func``), or ``num_runs_per_param`` above
            ``SpectralSearch.max_evaluations``.
        """
        log = ResultsLog(self.verbose)
        self.history, self.results, self.evaluations = log.history, log.results, 0
        self.dense_accuracy = self.final_accuracy = None
        selected = {name: self.layer_map[name] for config in self.configs for name in config.layer_names}
        search = self.search_algorithm
        spectral_search = isinstance(search, SpectralSearch)
        if spectral_search and self.num_runs_per_param > search.max_evaluations:
            raise ValueError(f"SKAutoTuner: num_runs_per_param: expected at most SpectralSearch.max_evaluations "
                             f"= {search.max_evaluations}, got {self.num_runs_per_param}")
        evaluator = Evaluator(self.model, self.layer_map, self.accuracy_eval_func, self.optmization_eval_func,
                              self.num_runs_per_param, self.accuracy_threshold, log)
        with capture(selected if spectral_search and search.data_aware else {}) as grams:
            if spectral_search or self.accuracy_threshold == DENSE:  # the Gram matrices come with it
                self.dense_accuracy = evaluator.measure_dense(list(selected))
        units, owners = units_of(self.configs, self.layer_map, grams)  # built after the Grams were captured
        evaluator.set_units(units)
        if spectral_search:
            assert self.dense_accuracy is not None
            best, self.final_accuracy = spectral(evaluator, search, self.dense_accuracy)
        else:
            best, self.final_accuracy = black_box(evaluator, search, owners, self.verbose)
        self.evaluations = log.evaluations
        self._finish(evaluator, owners, best)
        return self.best_params

    def _finish(self, evaluator: Evaluator, owners: list[LayerConfig], best: Assignment) -> None:
        self.best_assignment_size = evaluator.size(best)
        if self.verbose:
            print(f"[SKAutoTuner] chosen: {self.best_assignment_size} of {evaluator.dense_size} numbers stored, "
                  f"{self.evaluations} accuracy evaluations")
        self.best_params = {}
        for u, (unit, index, config) in enumerate(zip(evaluator.units, best, owners)):
            modules = [None] * len(unit.names) if index is None else evaluator.modules(u, index)
            for name, module in zip(unit.names, modules):
                self.best_params[name] = {"params": None if index is None else dict(unit.options[index].params),
                                          "copy_weights": config.copy_weights, "best_layer": module}

    # -- results (Panther's names) ---------------------------------------------------------
    def apply_best_params(self) -> nn.Module:
        """Puts the chosen layers into the model (in place; a None choice stays dense) and returns
        it. RuntimeError ``"SKAutoTuner.apply_best_params: no tuning results yet; ..."`` before
        :meth:`tune` or :meth:`load_tuning_results`."""
        if not self.best_params:
            raise RuntimeError("SKAutoTuner.apply_best_params: no tuning results yet; call tune() or "
                               "load_tuning_results() first")
        for name, data in self.best_params.items():
            if data.get("best_layer") is not None:
                set_module(self.model, name, data["best_layer"])
        return self.model

    def get_best_params(self) -> dict[str, dict[str, Any]]:
        """``best_params``: the choice of the last :meth:`tune` or :meth:`load_tuning_results`."""
        return self.best_params

    def replace_without_tuning(self, tolerance: float = 0.1) -> nn.Module:
        """Replaces every selected layer without evaluating the model and returns it. Explicit
        params: the first value of each (Panther's rule). ``params="auto"``: the smallest setting
        whose relative error (from the layer's spectrum) is ≤ ``tolerance`` (in [0, 1), else a
        ValueError), or the most accurate setting for layers without a spectrum (attention); a
        layer for which no setting meets it and saves numbers stays dense."""
        if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0.0 <= tolerance < 1.0:
            raise ValueError(f"SKAutoTuner.replace_without_tuning: tolerance: expected a number in [0, 1), got "
                             f"{tolerance!r}")
        units, owners = units_of(self.configs, self.layer_map, first_only=True)
        for unit, config in zip(units, owners):
            option = unit.options[0]
            if config._auto:
                fits = [o for o in unit.options if o.error is not None and o.error <= tolerance]
                if not fits and unit.options[0].error is not None:
                    continue  # no setting meets the tolerance and saves numbers: stays dense
                option = fits[0] if fits else unit.options[-1]
            for name, candidate in zip(unit.names, option.members):
                set_module(self.model, name, built(candidate, self.layer_map[name]))
        return self.model

    def get_results_dataframe(self) -> Any:
        """``results`` as a pandas DataFrame (a list of dicts without pandas), a row per evaluation
        and layer or group: ``layer_name``, ``num_terms``, ``low_rank``, the other parameters, then
        ``results``' columns. ``score``: the accuracy without a threshold; with one, −∞ below it,
        else the optimization function's value or minus the stored size."""
        rows = table_rows(self.results)
        try:
            import pandas as pd
        except ImportError:
            return rows
        return pd.DataFrame(rows)

    def save_tuning_results(self, file_path: Union[str, os.PathLike[str]]) -> None:
        """Writes the results, best parameters and history (parent directories are created): a
        ``.pkl``/``.pickle`` name gives a pickle of Panther's layout (``"results"``,
        ``"best_params"``, ``"config"``) plus ``"history"``, ``"evaluations"``,
        ``"dense_accuracy"``, ``"final_accuracy"``; any other name, JSON of the same with each
        chosen layer's tensors as lists instead of the module."""
        path = os.fspath(file_path)
        _results_file.save(path, self.results, self.best_params, self.configs,
                           {"history": self.history, "evaluations": self.evaluations,
                            "dense_accuracy": self.dense_accuracy, "final_accuracy": self.final_accuracy})
        if self.verbose:
            print(f"[SKAutoTuner] tuning results saved to {path}")

    def load_tuning_results(self, file_path: Union[str, os.PathLike[str]]) -> None:
        """Reads what :meth:`save_tuning_results` wrote, or Panther's pickle (the format is read
        from the file; pickles through a restricted unpickler), and rebuilds the chosen layers
        from this tuner's model with the saved tensors (a warning where they do not fit), so
        :meth:`apply_best_params` works. FileNotFoundError for a missing file; ValueError for a
        file of neither format, a layer these configs do not select, or params it does not accept."""
        path = os.fspath(file_path)
        selected = {name: config.copy_weights for config in self.configs for name in config.layer_names}
        data = _results_file.load(path, selected, self.layer_map)
        self.results, self.best_params = data["results"], data["best_params"]
        self.history, self.evaluations = data.get("history", []), data.get("evaluations", 0)
        self.dense_accuracy, self.final_accuracy = data.get("dense_accuracy"), data.get("final_accuracy")
        if self.verbose:
            print(f"[SKAutoTuner] tuning results loaded from {path}")
