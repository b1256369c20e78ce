"""The evaluator one ``tune()`` creates: installs assignments, calls the user's functions, scores
and logs."""
from __future__ import annotations

from typing import Any, Callable, Optional

from torch import nn

from sketchcore.tuner._candidates import stored
from sketchcore.tuner._results import ResultsLog
from sketchcore.tuner._scores import DENSE, Threshold, checked_score, warn_on_scale_mismatch
from sketchcore.tuner._spectral import Assignment, Unit


def set_module(model: nn.Module, name: str, module: nn.Module) -> None:
    """Puts ``module`` at ``name`` (a dotted path) in ``model``."""
    parent_name, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent_name) if parent_name else model, child, module)


def built(candidate: Any, dense: nn.Module) -> nn.Module:
    """The candidate's layer, in the dense layer's train/eval mode."""
    module: nn.Module = candidate.build()
    module.train(dense.training)
    return module


class Evaluator:
    """One ``tune()``'s evaluations: the model with an assignment installed, its size, accuracy and
    score. A ``"dense"`` threshold becomes a number once :meth:`measure_dense` ran."""

    def __init__(self, model: nn.Module, layer_map: dict[str, nn.Module], accuracy: Callable[..., Any],
                 optimize: Optional[Callable[..., Any]], runs: int, threshold: Threshold, log: ResultsLog) -> None:
        self.model, self.layer_map, self.log = model, layer_map, log
        self.accuracy_fn, self.optimize, self.runs, self.given = accuracy, optimize, runs, threshold
        self.threshold: Optional[float] = threshold if isinstance(threshold, float) else None
        self.dense_size = stored(model)
        self._scale_checked = False
        self.set_units([])

    def set_units(self, units: list[Unit]) -> None:
        """The units (set after the dense evaluation, which captures the Grams they are built from)."""
        self.units, self.dense = units, tuple(None for _ in units)
        self._built: dict[tuple[int, int], list[nn.Module]] = {}
        self.evaluation_of: dict[Assignment, int] = {}

    def modules(self, u: int, index: int) -> list[nn.Module]:
        """The layers of unit ``u`` at option ``index``, built once per tune()."""
        if (u, index) not in self._built:
            unit = self.units[u]
            self._built[u, index] = [built(c, self.layer_map[name])
                                     for name, c in zip(unit.names, unit.options[index].members)]
        return self._built[u, index]

    def install(self, assignment: Assignment) -> None:
        for u, (unit, index) in enumerate(zip(self.units, assignment)):
            modules = [self.layer_map[n] for n in unit.names] if index is None else self.modules(u, index)
            for name, module in zip(unit.names, modules):
                set_module(self.model, name, module)

    def size(self, assignment: Assignment) -> int:
        return self.dense_size - sum(u.dense_size for u in self.units) + sum(
            u.size(i) for u, i in zip(self.units, assignment))

    def meets(self, accuracy: float) -> bool:
        return self.threshold is None or accuracy >= self.threshold

    def call(self, resource: Any = None) -> float:
        """The mean of ``runs`` accuracy calls (``resource=``: Panther's hyperband hook)."""
        scores = []
        for _ in range(self.runs):
            value = (self.accuracy_fn(self.model) if resource is None
                     else self.accuracy_fn(self.model, resource=resource))
            scores.append(checked_score(value, "accuracy_eval_func"))
            self.log.evaluations += 1
            if not self._scale_checked:
                self._scale_checked = True
                warn_on_scale_mismatch(self.threshold, scores[-1], stacklevel=5)
        return sum(scores) / len(scores)

    def measure_dense(self, names: list[str]) -> float:
        """The dense model's score (the threshold, for ``"dense"``), logged."""
        accuracy = self.call()
        if self.given == DENSE:
            self.threshold = accuracy
        self.log.log("dense", accuracy, self.dense_size, {name: None for name in names}, self.meets(accuracy))
        return accuracy

    def _with(self, assignment: Assignment, function: Callable[[], float]) -> float:
        self.install(assignment)
        try:
            return function()
        finally:
            self.install(self.dense)

    def speed(self, assignment: Assignment) -> float:
        """``optmization_eval_func`` of the model with ``assignment`` installed."""
        optimize = self.optimize
        assert optimize is not None
        return self._with(assignment, lambda: checked_score(optimize(self.model), "optmization_eval_func"))

    def accuracy(self, assignment: Assignment, stage: str, resource: Any = None) -> float:
        """Installs the assignment, evaluates, restores the dense layers, logs the evaluation."""
        accuracy = self._with(assignment, lambda: self.call(resource))
        self.log.log(stage, accuracy, self.size(assignment),
                     {name: (None if i is None else dict(u.options[i].params))
                      for u, i in zip(self.units, assignment) for name in u.names}, self.meets(accuracy))
        return accuracy

    def score(self, assignment: Assignment, accuracy: float,
              measure_speed: bool = False) -> tuple[float, Optional[float]]:
        """(score, speed) by the score rule of ``SKAutoTuner.get_results_dataframe``; the
        optimization function is called only with ``measure_speed``."""
        if self.threshold is None:
            return accuracy, None
        if not self.meets(accuracy):
            return float("-inf"), None
        if measure_speed and self.optimize is not None:
            speed = self.speed(assignment)
            return speed, speed
        return -float(self.size(assignment)), None

    def record(self, assignment: Assignment, accuracy: float, score: float, speed: Optional[float],
               only: Optional[int] = None) -> None:
        """One results row per unit (only unit ``only``'s when given: Panther's per-layer loop)."""
        size = self.size(assignment)
        for u, (unit, index) in enumerate(zip(self.units, assignment)):
            if only is None or u == only:
                self.log.record(unit.key, None if index is None else dict(unit.options[index].params),
                                unit.kind(index), score, accuracy, speed, size)
        self.evaluation_of[assignment] = self.log.history[-1]["evaluation"]
