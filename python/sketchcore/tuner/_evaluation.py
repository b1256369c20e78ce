"""How the tuner evaluates: installing an assignment of settings into the model, calling the
user's functions (each value checked), and recording the history and the results rows."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from torch import nn

from sketchcore.tuner._results import _set
from sketchcore.tuner._scores import checked_score, warn_on_scale_mismatch
from sketchcore.tuner._spectral import Assignment, Unit

if TYPE_CHECKING:
    from sketchcore.tuner._tuner import SKAutoTuner


class EvaluationMixin:
    """The evaluation steps of :class:`SKAutoTuner` (no public members)."""

    def _modules(self: SKAutoTuner, unit: Unit, index: int) -> list[nn.Module]:
        """The layers of ``unit`` at option ``index``, built once per tune()."""
        cache = self._built.setdefault(id(unit), {})
        if index not in cache:
            made = []
            for name, candidate in zip(unit.names, unit.options[index].members):
                module = candidate.build()
                module.train(self.layer_map[name].training)
                made.append(module)
            cache[index] = made
        return cache[index]

    def _install(self: SKAutoTuner, units: list[Unit], assignment: Assignment) -> None:
        for unit, index in zip(units, assignment):
            modules = [self.layer_map[n] for n in unit.names] if index is None else self._modules(unit, index)
            for name, module in zip(unit.names, modules):
                _set(self.model, name, module)

    def _dense(self: SKAutoTuner, units: list[Unit]) -> Assignment:
        return tuple(None for _ in units)

    def _size(self: SKAutoTuner, units: list[Unit], assignment: Assignment) -> int:
        return self._dense_size - sum(u.dense_size for u in units) + sum(
            u.size(i) for u, i in zip(units, assignment))

    def _call(self: SKAutoTuner, resource: Any = None) -> float:
        """The mean of ``num_runs_per_param`` calls of the accuracy function on the model as it is
        (with ``resource=`` when a search hands one out, as Panther's hyperband hook)."""
        scores = []
        for _ in range(self.num_runs_per_param):
            value = (self.accuracy_eval_func(self.model) if resource is None
                     else self.accuracy_eval_func(self.model, resource=resource))
            scores.append(checked_score(value, "accuracy_eval_func"))
            self.evaluations += 1
            if not self._scale_checked:
                self._scale_checked = True
                threshold = self.accuracy_threshold
                warn_on_scale_mismatch(threshold if isinstance(threshold, float) else None, scores[-1], stacklevel=5)
        return sum(scores) / len(scores)

    def _speed(self: SKAutoTuner, units: list[Unit], assignment: Assignment) -> float:
        """``optmization_eval_func`` of the model with ``assignment`` installed."""
        assert self.optmization_eval_func is not None
        self._install(units, assignment)
        try:
            return checked_score(self.optmization_eval_func(self.model), "optmization_eval_func")
        finally:
            self._install(units, self._dense(units))

    def _accuracy(self: SKAutoTuner, units: list[Unit], assignment: Assignment, stage: str,
                  resource: Any = None) -> float:
        """Installs the assignment, evaluates, restores the dense layers, logs the evaluation."""
        self._install(units, assignment)
        try:
            accuracy = self._call(resource)
        finally:
            self._install(units, self._dense(units))
        self._log(stage, accuracy, self._size(units, assignment),
                  {name: (None if i is None else dict(u.options[i].params))
                   for u, i in zip(units, assignment) for name in u.names})
        return accuracy

    def _meets(self: SKAutoTuner, accuracy: float) -> bool:
        return self._threshold is None or accuracy >= self._threshold

    def _log(self: SKAutoTuner, stage: str, accuracy: float, size: int, layers: dict[str, Any]) -> None:
        row = {"evaluation": len(self.history), "stage": stage, "accuracy": accuracy, "parameters": size,
               "layers": layers, "meets_threshold": self._meets(accuracy)}
        self.history.append(row)
        if self.verbose:
            print(f"[SKAutoTuner] {stage} #{row['evaluation']}: accuracy {accuracy:.5g}, "
                  f"{row['parameters']} numbers stored, {row['layers']}")

    def _record(self: SKAutoTuner, units: list[Unit], assignment: Assignment, accuracy: float, score: float,
                speed: Optional[float], only: Optional[int] = None) -> None:
        """One results row per unit (only unit ``only``'s when given: Panther's per-layer loop),
        keyed as Panther keys them: the layer name, or the names joined by "_" for a group."""
        size = self._size(units, assignment)
        for u, (unit, index) in enumerate(zip(units, assignment)):
            if only is not None and u != only:
                continue
            self.results.setdefault(unit.key, []).append(
                {"params": None if index is None else dict(unit.options[index].params),
                 "layer_class": unit.kind(index), "score": score, "accuracy": accuracy, "speed": speed,
                 "parameters": size, "evaluation": self.history[-1]["evaluation"]})
        self._evaluation_of[assignment] = self.history[-1]["evaluation"]
