"""``SKAutoTuner``: Panther's auto-tuner, call for call, with a search that needs far fewer
evaluations (see ``_spectral``)."""
from __future__ import annotations

import math
import warnings
from typing import Any, Callable, Optional, Sequence, Union

from torch import nn

from sketchcore.tuner._candidates import stored
from sketchcore.tuner._gram import capture
from sketchcore.tuner._configs import LayerConfig, TuningConfigs
from sketchcore.tuner._params import Categorical
from sketchcore.tuner._results import ResultsMixin, _set
from sketchcore.tuner._select import resolve
from sketchcore.tuner._spectral import Assignment, BudgetExhausted, SpectralSearch, Unit
from sketchcore.tuner._units import build_units

EvalFunc = Callable[[nn.Module], Any]


class SKAutoTuner(ResultsMixin):
    """Chooses sketched replacements for a model's layers (Panther's ``SKAutoTuner`` API).

    ``accuracy_eval_func(model)`` returns a score, higher is better. With ``accuracy_threshold``
    the tuner returns the smallest model (fewest stored numbers) whose score is ≥ the threshold
    — or, with ``optmization_eval_func`` (Panther's spelling; ``optimization_eval_func`` is the
    same), the feasible model that function scores highest. Without a threshold, the dense
    model's own score is the threshold. Each evaluation calls ``accuracy_eval_func``
    ``num_runs_per_param`` times and uses the mean.

    ``search_algorithm``: None or a :class:`SpectralSearch` (the default) places per-layer
    budgets from the layers' singular spectra with a few dozen evaluations; a Panther-style
    :class:`SearchAlgorithm` (``OptunaSearch``, ``RandomSearch``, ``GridSearch``) runs Panther's
    black-box loop instead (each layer tuned on its own with the others dense, each trial one
    evaluation). The model is changed in place only by :meth:`apply_best_params` and
    :meth:`replace_without_tuning`; ``evaluations`` counts the accuracy calls made.

    Parameters
    ----------
    model : torch.nn.Module
        The trained model; its ``nn.Linear``, ``nn.Conv2d`` and ``nn.MultiheadAttention`` layers
        can be selected (see ``LAYER_TYPE_MAPPING``).
    configs : TuningConfigs, LayerConfig or list of LayerConfig
        Which layers and which search spaces; each layer may be selected by one config only.
    accuracy_eval_func : callable
        ``model → score`` (higher is better).
    search_algorithm : SpectralSearch or SearchAlgorithm, optional
        Default ``SpectralSearch()``.
    verbose : bool, default False
        Print a line per evaluation.
    accuracy_threshold : float, optional
        Lowest acceptable score; default the dense model's score.
    optmization_eval_func, optimization_eval_func : callable, optional
        ``model → value`` to maximize among the models meeting the threshold (two spellings of
        one argument; give at most one).
    num_runs_per_param : int, default 1
        Calls of ``accuracy_eval_func`` averaged per evaluation, ≥ 1.

    Raises
    ------
    TypeError
        ``"SKAutoTuner: model: expected a torch.nn.Module, got ..."``, ``"SKAutoTuner: configs:
        expected a TuningConfigs, a LayerConfig or a list of them, got ..."``, ``"SKAutoTuner:
        accuracy_eval_func: expected a callable, got ..."``, ``"SKAutoTuner:
        optmization_eval_func: expected a callable, got ..."``, ``"SKAutoTuner: search_algorithm:
        expected a SpectralSearch or a SearchAlgorithm (initialize/get_next_params/update), got
        ..."``, ``"SKAutoTuner: accuracy_threshold: expected a finite number or None, got ..."``,
        or, for a selected layer of another type, ``"SKAutoTuner: layer '...': expected one of
        ['Linear', 'Conv2d', 'MultiheadAttention'], got ..."``.
    ValueError
        ``"SKAutoTuner: optimization_eval_func: expected it or its Panther spelling
        optmization_eval_func, got both"``, ``"SKAutoTuner: num_runs_per_param: expected an
        integer ≥ 1, got ..."``, ``"SKAutoTuner: configs: layer '...' is selected by configs[i] and
        configs[j]; expected each layer in one config"``, ``"SKAutoTuner: configs: expected at
        least one LayerConfig, got none"``, or a selector that matches no layer or is malformed
        (``"LayerConfig: layer_names: no layer of the model matches ..."`` and the other
        ``"LayerConfig: layer_names..."`` messages; a wrongly typed selector value is a TypeError).

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
    {'0': {'rank': 1}, '2': {'rank': 1}}
    >>> tuner.apply_best_params()[0]
    LowRankLinear(in_features=64, out_features=64, rank=1, bias=True, activation='none')
    >>> SKAutoTuner(model, LayerConfig("0"), lambda m: 1.0, num_runs_per_param=0)
    Traceback (most recent call last):
        ...
    ValueError: SKAutoTuner: num_runs_per_param: expected an integer ≥ 1, got 0
    """

    def __init__(self, model: nn.Module, configs: Union[TuningConfigs, LayerConfig, Sequence[LayerConfig]],
                 accuracy_eval_func: EvalFunc, search_algorithm: Any = None, verbose: bool = False,
                 accuracy_threshold: Optional[float] = None, optmization_eval_func: Optional[EvalFunc] = None,
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
        if not callable(accuracy_eval_func):
            raise TypeError(f"SKAutoTuner: accuracy_eval_func: expected a callable, got "
                            f"{type(accuracy_eval_func).__name__}")
        if optmization_eval_func is not None and optimization_eval_func is not None:
            raise ValueError("SKAutoTuner: optimization_eval_func: expected it or its Panther spelling "
                             "optmization_eval_func, got both")
        optimize = optimization_eval_func if optimization_eval_func is not None else optmization_eval_func
        if optimize is not None and not callable(optimize):
            raise TypeError(f"SKAutoTuner: optmization_eval_func: expected a callable, got {type(optimize).__name__}")
        if search_algorithm is None:
            search_algorithm = SpectralSearch()
        elif not isinstance(search_algorithm, SpectralSearch) and not all(
                hasattr(search_algorithm, m) for m in ("initialize", "get_next_params", "update")):
            raise TypeError(f"SKAutoTuner: search_algorithm: expected a SpectralSearch or a SearchAlgorithm "
                            f"(initialize/get_next_params/update), got {type(search_algorithm).__name__}")
        if accuracy_threshold is not None and (isinstance(accuracy_threshold, bool) or not isinstance(
                accuracy_threshold, (int, float)) or not math.isfinite(accuracy_threshold)):
            raise TypeError(f"SKAutoTuner: accuracy_threshold: expected a finite number or None, got "
                            f"{accuracy_threshold!r}")
        if isinstance(num_runs_per_param, bool) or not isinstance(num_runs_per_param, int) or num_runs_per_param < 1:
            raise ValueError(f"SKAutoTuner: num_runs_per_param: expected an integer ≥ 1, got {num_runs_per_param!r}")
        self.model, self.accuracy_eval_func, self.search_algorithm = model, accuracy_eval_func, search_algorithm
        self.verbose, self.accuracy_threshold = bool(verbose), accuracy_threshold
        self.optmization_eval_func = self.optimization_eval_func = optimize
        self.num_runs_per_param = num_runs_per_param
        self.layer_map = {name: module for name, module in model.named_modules() if name}
        self.configs = self._resolve(configs)
        self.results: dict[str, list[dict[str, Any]]] = {}
        self.best_params: dict[str, dict[str, Any]] = {}
        self.history: list[dict[str, Any]] = []
        self.evaluations = 0
        self.dense_accuracy: Optional[float] = None
        self.final_accuracy: Optional[float] = None

    # -- configuration ---------------------------------------------------------------------
    def _resolve(self, configs: TuningConfigs) -> TuningConfigs:
        resolved, seen = [], {}
        for index, config in enumerate(configs):
            names = resolve(self.layer_map, config.layer_names)
            for name in names:
                if name in seen:
                    raise ValueError(f"SKAutoTuner: configs: layer {name!r} is selected by configs[{seen[name]}] and "
                                     f"configs[{index}]; expected each layer in one config")
                seen[name] = index
            resolved.append(LayerConfig(names, config.params, config.separate, config.copy_weights))
        if not resolved:
            raise ValueError("SKAutoTuner: configs: expected at least one LayerConfig, got none")
        return TuningConfigs(resolved)

    def getConfigs(self) -> TuningConfigs:  # noqa: N802 - Panther's name
        """The tuner's configs, with every selector resolved to the list of layer names it matched.

        Returns
        -------
        TuningConfigs
            One LayerConfig per given config, ``layer_names`` a sorted list of names.

        Examples
        --------
        >>> import torch
        >>> from torch import nn
        >>> from sketchcore.tuner import LayerConfig, SKAutoTuner
        >>> _ = torch.manual_seed(0)
        >>> model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
        >>> tuner = SKAutoTuner(model, LayerConfig({"type": "Linear"}), lambda m: 1.0, accuracy_threshold=0.5)
        >>> tuner.getConfigs()[0].layer_names
        ['0', '2']
        """
        return self.configs

    def setConfigs(self, configs: TuningConfigs) -> None:  # noqa: N802 - Panther's name
        """Replaces the configs (resolved against the model) for the next :meth:`tune`.

        Parameters
        ----------
        configs : TuningConfigs
            The new configs.

        Raises
        ------
        ValueError
            When a layer is selected by two configs, no config is given, or a selector matches
            no layer (as in the constructor).
        TypeError
            For a selected layer of an unsupported type.

        Examples
        --------
        >>> import torch
        >>> from torch import nn
        >>> from sketchcore.tuner import LayerConfig, SKAutoTuner
        >>> _ = torch.manual_seed(0)
        >>> model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
        >>> tuner = SKAutoTuner(model, LayerConfig({"type": "Linear"}), lambda m: 1.0, accuracy_threshold=0.5)
        >>> from sketchcore.tuner import TuningConfigs
        >>> tuner.setConfigs(TuningConfigs([LayerConfig("2", {"rank": [2, 4]})]))
        >>> tuner.getConfigs()[0].layer_names
        ['2']
        """
        self.configs = self._resolve(configs)

    def _units(self, grams: Optional[dict[str, Any]] = None) -> tuple[list[Unit], list[bool]]:
        units, copies = [], []
        for config in self.configs:
            for unit in build_units(self.layer_map, config.layer_names, config.params, config.separate,
                                    config.copy_weights, grams):
                units.append(unit)
                copies.append(config.copy_weights)
        return units, copies

    # -- evaluation ------------------------------------------------------------------------
    def _modules(self, unit: Unit, index: int) -> list[nn.Module]:
        cache = self._built.setdefault(id(unit), {})
        if index not in cache:
            made = []
            for name, candidate in zip(unit.names, unit.options[index].members):
                module = candidate.build()
                module.train(self.layer_map[name].training)
                made.append(module)
            cache[index] = made
        return cache[index]

    def _install(self, units: list[Unit], assignment: Assignment) -> None:
        for unit, index in zip(units, assignment):
            modules = [self.layer_map[n] for n in unit.names] if index is None else self._modules(unit, index)
            for name, module in zip(unit.names, modules):
                _set(self.model, name, module)

    def _size(self, units: list[Unit], assignment: Assignment) -> int:
        return self._dense_size - sum(u.dense_size for u in units) + sum(
            u.size(i) for u, i in zip(units, assignment))

    def _call(self) -> float:
        """The mean of ``num_runs_per_param`` calls of the accuracy function on the model as it is."""
        scores = [float(self.accuracy_eval_func(self.model)) for _ in range(self.num_runs_per_param)]
        self.evaluations += self.num_runs_per_param
        return sum(scores) / len(scores)

    def _accuracy(self, units: list[Unit], assignment: Assignment, stage: str) -> float:
        """Installs the assignment, evaluates, restores the dense layers."""
        self._install(units, assignment)
        try:
            accuracy = self._call()
        finally:
            self._install(units, tuple(None for _ in units))
        self._log(stage, accuracy, self._size(units, assignment),
                  {name: (None if i is None else dict(u.options[i].params))
                   for u, i in zip(units, assignment) for name in u.names})
        return accuracy

    def _log(self, stage: str, accuracy: float, size: int, layers: dict[str, Any]) -> None:
        row = {"evaluation": len(self.history), "stage": stage, "accuracy": accuracy, "parameters": size,
               "layers": layers}
        row["meets_threshold"] = self.accuracy_threshold is None or accuracy >= self.accuracy_threshold
        self.history.append(row)
        if self.verbose:
            print(f"[SKAutoTuner] {stage} #{row['evaluation']}: accuracy {accuracy:.5g}, "
                  f"{row['parameters']} numbers stored, {row['layers']}")

    # -- tuning ----------------------------------------------------------------------------
    def tune(self) -> dict[str, dict[str, Any]]:
        """Searches and returns ``best_params``: for each layer, ``{"params": ... or None (keep
        dense), "copy_weights": ..., "best_layer": module or None}`` (Panther's format).

        The model is left dense (call :meth:`apply_best_params` to install the choice);
        ``evaluations``, ``history``, ``results``, ``dense_accuracy`` and ``final_accuracy`` are
        filled in.

        Returns
        -------
        dict
            Layer name → ``{"params", "copy_weights", "best_layer"}``.

        Raises
        ------
        ValueError
            ``"SKAutoTuner: num_runs_per_param: expected at most SpectralSearch.max_evaluations
            ..."`` when one evaluation needs more calls than the search's budget.

        Examples
        --------
        >>> import torch
        >>> from torch import nn
        >>> from sketchcore.tuner import LayerConfig, SKAutoTuner
        >>> _ = torch.manual_seed(0)
        >>> model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
        >>> tuner = SKAutoTuner(model, LayerConfig({"type": "Linear"}), lambda m: 1.0, accuracy_threshold=0.5)
        >>> best = tuner.tune()
        >>> sorted(best), best["2"]["params"], type(model[0]).__name__
        (['0', '2'], {'rank': 1}, 'Linear')
        """
        self._built: dict[int, dict[int, list[nn.Module]]] = {}
        self._evaluation_of: dict[Assignment, int] = {}
        self._dense_size = stored(self.model)
        self.history, self.results, self.evaluations = [], {}, 0
        if isinstance(self.search_algorithm, SpectralSearch):
            if self.num_runs_per_param > self.search_algorithm.max_evaluations:
                raise ValueError(f"SKAutoTuner: num_runs_per_param: expected at most SpectralSearch.max_evaluations "
                                 f"= {self.search_algorithm.max_evaluations}, got {self.num_runs_per_param}")
            selected = {name: self.layer_map[name] for config in self.configs for name in config.layer_names}
            with capture(selected if self.search_algorithm.data_aware else {}) as grams:
                self.dense_accuracy = self._call()  # the dense model, once: the Gram matrices come with it
            self._log("dense", self.dense_accuracy, self._dense_size, {name: None for name in selected})
            units, copies = self._units(grams)
            best = self._spectral(units)
        else:
            units, copies = self._units()
            best = self._black_box(units)
        self._install(units, best)
        if self.verbose:
            print(f"[SKAutoTuner] chosen: {self._size(units, best)} of {self._dense_size} numbers stored, "
                  f"{self.evaluations} accuracy evaluations")
        self.best_assignment_size = self._size(units, best)
        self.best_params = {}
        for unit, index, copy in zip(units, best, copies):
            modules = [None] * len(unit.names) if index is None else self._modules(unit, index)
            for name, module in zip(unit.names, modules):
                self.best_params[name] = {"params": None if index is None else dict(unit.options[index].params),
                                          "copy_weights": copy, "best_layer": module}
        self._install(units, tuple(None for _ in units))
        return self.best_params

    def _spectral(self, units: list[Unit]) -> Assignment:
        search = self.search_algorithm
        cache: dict[Assignment, bool] = {}
        dense = tuple(None for _ in units)
        stage = ["dense"]

        def feasible(assignment: Assignment) -> bool:
            if assignment not in cache:
                if self.evaluations + self.num_runs_per_param > search.max_evaluations:
                    raise BudgetExhausted
                accuracy = self._accuracy(units, assignment, stage[0])
                cache[assignment] = self.accuracy_threshold is None or accuracy >= self.accuracy_threshold
                self._record(units, assignment, accuracy, cache[assignment])
            return cache[assignment]

        threshold_given = self.accuracy_threshold is not None
        assert self.dense_accuracy is not None
        if not threshold_given:
            self.accuracy_threshold = self.dense_accuracy
        cache[dense] = self.dense_accuracy >= self.accuracy_threshold  # type: ignore[operator]
        self._record(units, dense, self.dense_accuracy, cache[dense])
        try:
            if not cache[dense]:
                warnings.warn(f"SKAutoTuner: the dense model scores {self.dense_accuracy:.6g}, below "
                              f"accuracy_threshold = {self.accuracy_threshold}; keeping it dense", stacklevel=3)
                return dense
            stage[0] = "search"
            chosen = search.run(units, feasible)
        finally:
            if not threshold_given:
                self.accuracy_threshold = None
        # every model the search evaluated is a candidate: the smallest feasible one wins (the
        # search's own pick is one of them unless accuracy was not monotone along its path)
        del chosen
        candidates = [a for a, ok in cache.items() if ok]
        best = self._pick(units, candidates) if candidates else dense
        self.final_accuracy = self.history[self._evaluation_of[best]]["accuracy"]
        return best

    def _pick(self, units: list[Unit], feasible: list[Assignment]) -> Assignment:
        """The smallest feasible model, or the one ``optmization_eval_func`` scores highest (ties:
        the smaller one)."""
        if self.optmization_eval_func is None:
            return min(feasible, key=lambda a: self._size(units, a))
        scored = []
        for assignment in feasible:
            self._install(units, assignment)
            try:
                speed = float(self.optmization_eval_func(self.model))
            finally:
                self._install(units, tuple(None for _ in units))
            for rows in self.results.values():  # the speed column of get_results_dataframe
                for row in rows:
                    if row["evaluation"] == self._evaluation_of[assignment]:
                        row["speed"] = row["score"] = speed
            scored.append((speed, -self._size(units, assignment), assignment))
        return max(scored, key=lambda t: (t[0], t[1]))[2]

    def _record(self, units: list[Unit], assignment: Assignment, accuracy: float, ok: bool,
                only: Optional[int] = None) -> None:
        """One results row per layer (only unit ``only``'s layers when given: Panther's per-layer loop)."""
        size = self._size(units, assignment)
        for u, (unit, index) in enumerate(zip(units, assignment)):
            if only is not None and u != only:
                continue
            params = None if index is None else dict(unit.options[index].params)
            for name in unit.names:
                self.results.setdefault(name, []).append(
                    {"params": params, "score": -float(size) if ok else float("-inf"), "accuracy": accuracy,
                     "speed": None, "parameters": size, "evaluation": self.history[-1]["evaluation"]})
        self._evaluation_of[assignment] = self.history[-1]["evaluation"]

    def _black_box(self, units: list[Unit]) -> Assignment:
        """Panther's loop: each unit on its own (the others dense), one evaluation per trial;
        score = optmization_eval_func when the threshold is met, else −∞ (Panther's rule); with a
        threshold and no optimization function, minus the model size; without a threshold, the
        accuracy."""
        best: list[Optional[int]] = [None] * len(units)
        dense = [None] * len(units)
        for u, unit in enumerate(units):
            keys = sorted({k for o in unit.options for k in o.params})
            space = {k: Categorical(sorted({o.params[k] for o in unit.options if k in o.params}, key=repr)) for k in keys}
            self.search_algorithm.initialize(space)
            best_score = float("-inf")
            while (params := self.search_algorithm.get_next_params()) is not None:
                index = next((i for i, o in enumerate(unit.options) if o.params == params), None)
                if index is None:  # a combination storing more than the dense layer
                    self.search_algorithm.update(params, float("-inf"))
                    continue
                trial = list(dense)
                trial[u] = index
                accuracy = self._accuracy(units, tuple(trial), "black-box")
                ok = self.accuracy_threshold is None or accuracy >= self.accuracy_threshold
                score = self._black_box_score(units, tuple(trial), accuracy, ok)
                self._record(units, tuple(trial), accuracy, ok, only=u)
                self.search_algorithm.update(params, score)
                if score > best_score:
                    best_score, best[u] = score, index
        if any(i is not None for i in best):
            self.final_accuracy = self._accuracy(units, tuple(best), "final")
        return tuple(best)

    def _black_box_score(self, units: list[Unit], trial: Assignment, accuracy: float, ok: bool) -> float:
        if self.accuracy_threshold is None:
            return accuracy
        if not ok:
            return float("-inf")
        if self.optmization_eval_func is None:
            return -float(self._size(units, trial))
        self._install(units, trial)
        try:
            return float(self.optmization_eval_func(self.model))
        finally:
            self._install(units, tuple(None for _ in units))
