"""The tuner's side of :class:`SpectralSearch`: the objective it searches for (the smallest
model meeting a threshold, the one ``optmization_eval_func`` prefers, or — with no threshold, as
in Panther — the most accurate model of the search space) and the final pick among every model
evaluated."""
from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from sketchcore.tuner._spectral import Assignment, BudgetExhausted, Unit

if TYPE_CHECKING:
    from sketchcore.tuner._tuner import SKAutoTuner


def _most_accurate(unit: Unit) -> int:
    """The option expected to be the most accurate: the lowest weight error (the smallest such),
    or the largest option where no spectrum applies."""
    if all(o.error is not None for o in unit.options):
        return min(range(len(unit.options)), key=lambda j: (unit.options[j].error, unit.options[j].size))
    return len(unit.options) - 1


def _below(units: list[Unit], tops: list[int]) -> list[Unit]:
    """The units with their most accurate option as the "dense" end of the search: what lies
    below it, and None standing for it."""
    return [Unit(u.names, u.options[t].size, [o for o in u.options if o.size < u.options[t].size], u.dense_kind)
            for u, t in zip(units, tops)]


class SpectralDriverMixin:
    """Runs :class:`SpectralSearch` for :class:`SKAutoTuner` (no public members)."""

    def _spectral(self: SKAutoTuner, units: list[Unit]) -> Assignment:
        search = self.search_algorithm
        cache: dict[Assignment, float] = {}  # every evaluated assignment → its accuracy
        dense = self._dense(units)
        assert self.dense_accuracy is not None
        cache[dense] = self.dense_accuracy
        stage = ["search"]

        def evaluate(assignment: Assignment) -> float:
            if assignment not in cache:
                if self.evaluations + self.num_runs_per_param > search.max_evaluations:
                    raise BudgetExhausted
                cache[assignment] = self._accuracy(units, assignment, stage[0])
                accuracy = cache[assignment]
                self._record(units, assignment, accuracy, self._objective(units, assignment, accuracy), None)
            return cache[assignment]

        if self.accuracy_threshold is None:
            return self._most_accurate_model(units, evaluate, cache)
        self._record(units, dense, self.dense_accuracy, self._objective(units, dense, self.dense_accuracy), None)
        if not self._meets(self.dense_accuracy):
            warnings.warn(f"SKAutoTuner: the dense model scores {self.dense_accuracy:.6g}, below "
                          f"accuracy_threshold = {self._threshold}; keeping it dense", stacklevel=3)
            self.final_accuracy = self.dense_accuracy
            return dense
        search.run(units, lambda a: self._meets(evaluate(a)))  # stops by itself when the budget is spent
        # every model the search evaluated is a candidate (accuracy need not be monotone along its path)
        best = self._pick(units, [a for a, accuracy in cache.items() if self._meets(accuracy)])
        self.final_accuracy = cache[best]
        return best

    def _objective(self: SKAutoTuner, units: list[Unit], assignment: Assignment, accuracy: float) -> float:
        """A row's score before any speed is measured: the accuracy without a threshold
        (Panther's), else minus the stored size of a model meeting it, −∞ for one that does not."""
        if self._threshold is None:
            return accuracy
        return -float(self._size(units, assignment)) if self._meets(accuracy) else float("-inf")

    def _most_accurate_model(self: SKAutoTuner, units: list[Unit], evaluate: object,
                             cache: dict[Assignment, float]) -> Assignment:
        """``accuracy_threshold=None``: every selected layer is replaced (the dense model is not in
        the search space, as in Panther) by the setting of the highest accuracy. The most accurate
        setting of each layer by its spectrum is evaluated first; then the spectral search looks
        for smaller models that score as high. Of all models evaluated, the most accurate wins, the
        smallest among equals."""
        assert callable(evaluate)
        tops = [_most_accurate(u) for u in units]
        reduced = _below(units, tops)
        # position in the unit's options of each option of the reduced unit (same filter, same order)
        positions = [[j for j, o in enumerate(u.options) if o.size < u.options[t].size] for u, t in zip(units, tops)]

        def lift(assignment: Assignment) -> Assignment:
            return tuple(top if index is None else where[index]
                         for top, where, index in zip(tops, positions, assignment))

        try:
            target = evaluate(tuple(tops))
        except BudgetExhausted:
            warnings.warn("SKAutoTuner: SpectralSearch.max_evaluations was spent on the dense model; the most "
                          "accurate setting of each layer by its spectrum is chosen unevaluated", stacklevel=3)
            return tuple(tops)
        self.search_algorithm.run(reduced, lambda a: evaluate(lift(a)) >= target)
        sketched = [a for a in cache if all(i is not None for i in a)]
        best = max(sketched, key=lambda a: (cache[a], -self._size(units, a)))
        self.final_accuracy = cache[best]
        return best

    def _pick(self: SKAutoTuner, units: list[Unit], feasible: list[Assignment]) -> Assignment:
        """The smallest feasible model, or the one ``optmization_eval_func`` scores highest (ties:
        the smaller one); its value becomes the rows' ``speed`` and ``score``."""
        if self.optmization_eval_func is None:
            return min(feasible, key=lambda a: self._size(units, a))
        scored = []
        for assignment in feasible:
            speed = self._speed(units, assignment)
            for rows in self.results.values():
                for row in rows:
                    if row["evaluation"] == self._evaluation_of[assignment]:
                        row["speed"] = row["score"] = speed
            scored.append((speed, -self._size(units, assignment), assignment))
        return max(scored, key=lambda t: (t[0], t[1]))[2]
