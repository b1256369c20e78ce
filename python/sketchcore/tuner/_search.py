"""Panther's black-box search interface (``initialize`` / ``get_next_params`` / ``update``) and
two plain searches over it: every trial is one full evaluation of the model."""
from __future__ import annotations

import itertools
import random
from typing import Any, Mapping, Optional

from sketchcore.tuner._params import Float, Int, choices


class SearchAlgorithm:
    """Base class of black-box searches, Panther's interface: the tuner calls
    :meth:`initialize` with a parameter space, then alternates :meth:`get_next_params` (None when
    done) and :meth:`update` with the score (higher is better)."""

    def initialize(self, param_space: Mapping[str, Any]) -> None:
        self.param_space = dict(param_space)
        self.best_params: Optional[dict[str, Any]] = None
        self.best_score: Optional[float] = None
        self.history: list[tuple[dict[str, Any], float]] = []

    def get_next_params(self) -> Optional[dict[str, Any]]:
        raise NotImplementedError

    def update(self, params: Mapping[str, Any], score: float) -> None:
        self.history.append((dict(params), float(score)))
        if self.best_score is None or score > self.best_score:
            self.best_params, self.best_score = dict(params), float(score)

    def get_best_params(self) -> Optional[dict[str, Any]]:
        return self.best_params

    def get_best_score(self) -> Optional[float]:
        return self.best_score

    def reset(self) -> None:
        self.initialize(getattr(self, "param_space", {}))

    def is_finished(self) -> bool:
        return False


def _check_trials(n_trials: object, where: str) -> int:
    if isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1:
        raise ValueError(f"{where}: n_trials: expected an integer ≥ 1, got {n_trials!r}")
    return n_trials


class RandomSearch(SearchAlgorithm):
    """``n_trials`` independent uniform draws from the space (log-uniform for ``log=True``
    ranges), seeded."""

    def __init__(self, n_trials: int = 20, seed: Optional[int] = None) -> None:
        self.n_trials = _check_trials(n_trials, "RandomSearch")
        self.seed = seed

    def initialize(self, param_space: Mapping[str, Any]) -> None:
        super().initialize(param_space)
        self._random = random.Random(self.seed)
        self._drawn = 0

    def _draw(self, name: str, spec: Any) -> Any:
        if isinstance(spec, Float) and spec.step is None:
            if spec.log:
                return spec.low * (spec.high / spec.low) ** self._random.random()
            return self._random.uniform(spec.low, spec.high)
        if isinstance(spec, Int) and spec.log:
            return min(spec.high, max(spec.low, round(spec.low * (spec.high / spec.low) ** self._random.random())))
        values = choices(spec, name)
        assert values is not None
        return self._random.choice(values)

    def get_next_params(self) -> Optional[dict[str, Any]]:
        if self._drawn >= self.n_trials:
            return None
        self._drawn += 1
        return {name: self._draw(name, spec) for name, spec in self.param_space.items()}

    def is_finished(self) -> bool:
        return self._drawn >= self.n_trials


class GridSearch(SearchAlgorithm):
    """Every combination of the (finite) space once, in order."""

    def initialize(self, param_space: Mapping[str, Any]) -> None:
        super().initialize(param_space)
        lists = {}
        for name, spec in self.param_space.items():
            values = choices(spec, name)
            if values is None:
                raise ValueError(f"GridSearch: {name}: a continuous Float has no grid; expected a list or a step")
            lists[name] = values
        self._grid = iter([dict(zip(lists, combo)) for combo in itertools.product(*lists.values())])
        self._finished = False

    def get_next_params(self) -> Optional[dict[str, Any]]:
        params = next(self._grid, None)
        self._finished = params is None
        return params

    def is_finished(self) -> bool:
        return self._finished
