"""The tuner's side of :class:`SpectralSearch` over an :class:`Evaluator`: the objective (see
``SKAutoTuner``'s ``accuracy_threshold``) and the final pick among every model evaluated."""
from __future__ import annotations

import warnings
from typing import Callable, Optional

from sketchcore.tuner._evaluation import Evaluator
from sketchcore.tuner._spectral import Assignment, BudgetExhausted, SpectralSearch, Unit

Evaluate = Callable[[Assignment], float]


def _most_accurate(unit: Unit) -> int:
    """The option of lowest error (the smallest such), or the largest without a spectrum."""
    if all(o.error is not None for o in unit.options):
        return min(range(len(unit.options)), key=lambda j: (unit.options[j].error, unit.options[j].size))
    return len(unit.options) - 1


def spectral(evaluator: Evaluator, search: SpectralSearch, dense_accuracy: float
             ) -> tuple[Assignment, Optional[float]]:
    """The assignment chosen and its accuracy; with a threshold, every evaluated model that met it
    is a candidate (accuracy need not be monotone along the search's path)."""
    cache: dict[Assignment, float] = {evaluator.dense: dense_accuracy}  # every evaluated assignment → accuracy

    def evaluate(assignment: Assignment) -> float:
        if assignment not in cache:
            if evaluator.log.evaluations + evaluator.runs > search.max_evaluations:
                raise BudgetExhausted
            accuracy = cache[assignment] = evaluator.accuracy(assignment, "search")
            evaluator.record(assignment, accuracy, evaluator.score(assignment, accuracy)[0], None)
        return cache[assignment]

    if evaluator.given is None:
        return _most_accurate_model(evaluator, search, evaluate, cache)
    dense = evaluator.dense
    evaluator.record(dense, dense_accuracy, evaluator.score(dense, dense_accuracy)[0], None)
    if not evaluator.meets(dense_accuracy):
        warnings.warn(f"SKAutoTuner: the dense model scores {dense_accuracy:.6g}, below accuracy_threshold = "
                      f"{evaluator.threshold}; keeping it dense", stacklevel=3)
        return dense, dense_accuracy
    search.run(evaluator.units, lambda a: evaluator.meets(evaluate(a)))  # stops when the budget is spent
    best = _pick(evaluator, [a for a, accuracy in cache.items() if evaluator.meets(accuracy)])
    return best, cache[best]


def _most_accurate_model(evaluator: Evaluator, search: SpectralSearch, evaluate: Evaluate,
                         cache: dict[Assignment, float]) -> tuple[Assignment, Optional[float]]:
    """``accuracy_threshold=None``: every layer replaced (as in Panther). The spectrum's most
    accurate setting is evaluated first, then smaller models scoring as high are searched for
    (None standing for it); the most accurate evaluated model wins, the smallest among equals."""
    units = evaluator.units
    tops = [_most_accurate(u) for u in units]
    # position in the unit's options of each option of the reduced unit (same filter, same order)
    positions = [[j for j, o in enumerate(u.options) if o.size < u.options[t].size] for u, t in zip(units, tops)]
    reduced = [Unit(u.names, u.options[t].size, [u.options[j] for j in where], u.dense_kind)
               for u, t, where in zip(units, tops, positions)]

    def lift(assignment: Assignment) -> Assignment:
        return tuple(top if index is None else where[index] for top, where, index in zip(tops, positions, assignment))

    try:
        target = evaluate(tuple(tops))
    except BudgetExhausted:
        warnings.warn("SKAutoTuner: SpectralSearch.max_evaluations was spent on the dense model; the most "
                      "accurate setting of each layer by its spectrum is chosen unevaluated", stacklevel=3)
        return tuple(tops), None
    search.run(reduced, lambda a: evaluate(lift(a)) >= target)
    sketched = [a for a in cache if all(i is not None for i in a)]
    best = max(sketched, key=lambda a: (cache[a], -evaluator.size(a)))
    return best, cache[best]


def _pick(evaluator: Evaluator, feasible: list[Assignment]) -> Assignment:
    """The smallest feasible model, or the one ``optmization_eval_func`` scores highest (ties: smaller)."""
    if evaluator.optimize is None:
        return min(feasible, key=evaluator.size)
    scored = []
    for assignment in feasible:
        speed = evaluator.speed(assignment)
        evaluator.log.set_speed(evaluator.evaluation_of[assignment], speed)
        scored.append((speed, -evaluator.size(assignment), assignment))
    return max(scored, key=lambda t: (t[0], t[1]))[2]
