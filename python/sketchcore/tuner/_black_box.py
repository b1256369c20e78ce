"""Panther's black-box loop for a :class:`SearchAlgorithm`: each unit searched on its own, the others
dense, one evaluation per trial, over the config's space as written (so that a sampler built for it,
e.g. Optuna's ``GridSampler``, proposes values the space holds)."""
from __future__ import annotations

import math
from typing import Any, Mapping, Optional

from sketchcore.tuner._configs import LayerConfig
from sketchcore.tuner._evaluation import Evaluator
from sketchcore.tuner._params import Categorical
from sketchcore.tuner._spectral import Assignment, Unit


def _space(config: LayerConfig, unit: Unit) -> dict[str, Any]:
    """The config's params as written; for "auto", the unit's own settings (listed exactly)."""
    if not config._auto:
        return dict(config.params)
    keys = list(dict.fromkeys(k for o in unit.options for k in o.params))
    return {k: Categorical(list(dict.fromkeys(o.params[k] for o in unit.options))) for k in keys}


def _index(unit: Unit, params: Mapping[str, Any]) -> Optional[int]:
    """The option of ``unit`` with these parameters (floats compared with a tolerance: Optuna's)."""
    def same(a: Any, b: Any) -> bool:
        if isinstance(a, float) or isinstance(b, float):
            return isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=1e-9)
        return bool(a == b)
    for i, option in enumerate(unit.options):
        if option.params.keys() == params.keys() and all(same(option.params[k], params[k]) for k in params):
            return i
    return None


def black_box(evaluator: Evaluator, search: Any, configs: list[LayerConfig], verbose: bool
              ) -> tuple[Assignment, Optional[float]]:
    """Per unit, the search's trials until it returns None; the best score wins (the first of
    equals; dense when every trial misses the threshold). Returns the assignment and its measured
    accuracy (None when every unit stays dense)."""
    units = evaluator.units
    best: list[Optional[int]] = [None] * len(units)
    for u, (unit, config) in enumerate(zip(units, configs)):
        if verbose:
            print(f"[SKAutoTuner] tuning {unit.key}")
        search.initialize(_space(config, unit))
        best_score = float("-inf")
        while (params := search.get_next_params()) is not None:
            resource = search.get_resource() if hasattr(search, "get_resource") else None
            index = _index(unit, params)
            if index is None:
                raise ValueError(f"SKAutoTuner: search_algorithm proposed {params} for {unit.key!r}, which is not "
                                 f"a setting of its search space {_space(config, unit)}")
            trial = tuple(index if v == u else None for v in range(len(units)))
            accuracy = evaluator.accuracy(trial, "black-box", resource)
            score, speed = evaluator.score(trial, accuracy, measure_speed=True)
            evaluator.record(trial, accuracy, score, speed, only=u)
            search.update(params, score)
            if score > best_score:
                best_score, best[u] = score, index
    if all(i is None for i in best):
        return tuple(best), None
    return tuple(best), evaluator.accuracy(tuple(best), "final")
