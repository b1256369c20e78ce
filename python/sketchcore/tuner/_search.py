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
    done) and :meth:`update` with the score (higher is better).

    Subclasses implement :meth:`get_next_params` (and usually :meth:`initialize` and
    :meth:`is_finished`); the base class keeps ``history``, ``best_params`` and ``best_score``.

    Examples
    --------
    A search that proposes each value of ``rank`` once:

    >>> from sketchcore.tuner import SearchAlgorithm
    >>> class EachRank(SearchAlgorithm):
    ...     def initialize(self, param_space):
    ...         super().initialize(param_space)
    ...         self._left = list(param_space["rank"])
    ...     def get_next_params(self):
    ...         return {"rank": self._left.pop(0)} if self._left else None
    >>> search = EachRank()
    >>> search.initialize({"rank": [4, 8]})
    >>> while (params := search.get_next_params()) is not None:
    ...     search.update(params, -params["rank"])
    >>> search.get_best_params(), search.get_best_score(), len(search.history)
    ({'rank': 4}, -4.0, 2)
    """

    def initialize(self, param_space: Mapping[str, Any]) -> None:
        """Starts a search over ``param_space`` (name → list, Categorical, Int or Float) and
        clears the history and the best result.

        Parameters
        ----------
        param_space : mapping
            Parameter name → its specification.

        Examples
        --------
        >>> from sketchcore.tuner import GridSearch
        >>> search = GridSearch()
        >>> search.initialize({"rank": [4, 8]})
        >>> search.param_space, search.history, search.get_best_params()
        ({'rank': [4, 8]}, [], None)
        """
        self.param_space = dict(param_space)
        self.best_params: Optional[dict[str, Any]] = None
        self.best_score: Optional[float] = None
        self.history: list[tuple[dict[str, Any], float]] = []

    def get_next_params(self) -> Optional[dict[str, Any]]:
        """The next parameters to evaluate, or None when the search is done.

        Returns
        -------
        dict or None
            Parameter name → value.

        Raises
        ------
        NotImplementedError
            In the base class; subclasses implement it.

        Examples
        --------
        >>> from sketchcore.tuner import GridSearch
        >>> search = GridSearch()
        >>> search.initialize({"rank": [4, 8]})
        >>> search.get_next_params(), search.get_next_params(), search.get_next_params()
        ({'rank': 4}, {'rank': 8}, None)
        """
        raise NotImplementedError

    def update(self, params: Mapping[str, Any], score: float) -> None:
        """Records ``score`` (higher is better) for ``params``, updating the best result.

        Parameters
        ----------
        params : mapping
            The parameters evaluated.
        score : float
            Their score; ``-inf`` marks an infeasible trial.

        Examples
        --------
        >>> from sketchcore.tuner import GridSearch
        >>> search = GridSearch()
        >>> search.initialize({"rank": [4, 8]})
        >>> search.update({"rank": 4}, 0.5); search.update({"rank": 8}, 0.9)
        >>> search.get_best_params(), search.get_best_score()
        ({'rank': 8}, 0.9)
        """
        self.history.append((dict(params), float(score)))
        if self.best_score is None or score > self.best_score:
            self.best_params, self.best_score = dict(params), float(score)

    def get_best_params(self) -> Optional[dict[str, Any]]:
        """The parameters of the highest score so far, or None before any :meth:`update`.

        Examples
        --------
        >>> from sketchcore.tuner import GridSearch
        >>> search = GridSearch()
        >>> search.initialize({"rank": [4]})
        >>> search.get_best_params() is None
        True
        >>> search.update({"rank": 4}, 1.0); search.get_best_params()
        {'rank': 4}
        """
        return self.best_params

    def get_best_score(self) -> Optional[float]:
        """The highest score so far, or None before any :meth:`update`.

        Examples
        --------
        >>> from sketchcore.tuner import GridSearch
        >>> search = GridSearch()
        >>> search.initialize({"rank": [4]})
        >>> search.update({"rank": 4}, 1); search.get_best_score()
        1.0
        """
        return self.best_score

    def reset(self) -> None:
        """Starts the search over again on the same parameter space.

        Examples
        --------
        >>> from sketchcore.tuner import GridSearch
        >>> search = GridSearch()
        >>> search.initialize({"rank": [4, 8]})
        >>> search.update(search.get_next_params(), 1.0)
        >>> search.reset()
        >>> search.get_next_params(), search.history
        ({'rank': 4}, [])
        """
        self.initialize(getattr(self, "param_space", {}))

    def is_finished(self) -> bool:
        """Whether the search has nothing more to propose (always False in the base class).

        Examples
        --------
        >>> from sketchcore.tuner import SearchAlgorithm
        >>> SearchAlgorithm().is_finished()
        False
        """
        return False


def _check_trials(n_trials: object, where: str) -> int:
    if isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1:
        raise ValueError(f"{where}: n_trials: expected an integer ≥ 1, got {n_trials!r}")
    return n_trials


class RandomSearch(SearchAlgorithm):
    """``n_trials`` independent uniform draws from the space (log-uniform for ``log=True``
    ranges), seeded.

    Parameters
    ----------
    n_trials : int, default 20
        Number of draws, ≥ 1.
    seed : int, optional
        Seed of the draws (Python's ``random.Random``); the same seed gives the same draws.

    Raises
    ------
    ValueError
        ``"RandomSearch: n_trials: expected an integer ≥ 1, got ..."``.

    Examples
    --------
    >>> from sketchcore.tuner import Int, RandomSearch
    >>> search = RandomSearch(n_trials=3, seed=0)
    >>> search.initialize({"rank": Int(1, 8), "kernel": ["a", "b"]})
    >>> draws = [search.get_next_params() for _ in range(4)]
    >>> [1 <= d["rank"] <= 8 and d["kernel"] in ("a", "b") for d in draws[:3]], draws[3], search.is_finished()
    ([True, True, True], None, True)
    """

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
        """A fresh draw from the space, or None after ``n_trials`` draws.

        Examples
        --------
        >>> from sketchcore.tuner import RandomSearch
        >>> search = RandomSearch(n_trials=1, seed=0)
        >>> search.initialize({"rank": [4]})
        >>> search.get_next_params(), search.get_next_params()
        ({'rank': 4}, None)
        """
        if self._drawn >= self.n_trials:
            return None
        self._drawn += 1
        return {name: self._draw(name, spec) for name, spec in self.param_space.items()}

    def is_finished(self) -> bool:
        """Whether all ``n_trials`` draws were made.

        Examples
        --------
        >>> from sketchcore.tuner import RandomSearch
        >>> search = RandomSearch(n_trials=1, seed=0)
        >>> search.initialize({"rank": [4]})
        >>> before = search.is_finished(); _ = search.get_next_params()
        >>> before, search.is_finished()
        (False, True)
        """
        return self._drawn >= self.n_trials


class GridSearch(SearchAlgorithm):
    """Every combination of the (finite) space once, in order.

    Raises
    ------
    ValueError
        From :meth:`initialize`: ``"GridSearch: <name>: a continuous Float has no grid; expected a
        list or a step"``.

    Examples
    --------
    >>> from sketchcore.tuner import Float, GridSearch
    >>> search = GridSearch()
    >>> search.initialize({"rank": [4, 8], "scale": Float(0.5, 1.0, step=0.5)})
    >>> [search.get_next_params() for _ in range(5)]
    [{'rank': 4, 'scale': 0.5}, {'rank': 4, 'scale': 1.0}, {'rank': 8, 'scale': 0.5}, {'rank': 8, 'scale': 1.0}, None]
    >>> search.initialize({"scale": Float(0.5, 1.0)})
    Traceback (most recent call last):
        ...
    ValueError: GridSearch: scale: a continuous Float has no grid; expected a list or a step
    """

    def initialize(self, param_space: Mapping[str, Any]) -> None:
        """Starts the grid over ``param_space``; see the class example.

        Raises
        ------
        ValueError
            For a continuous Float (no ``step``).

        Examples
        --------
        >>> from sketchcore.tuner import GridSearch, Int
        >>> search = GridSearch()
        >>> search.initialize({"rank": Int(2, 6, step=2)})
        >>> search.get_next_params()
        {'rank': 2}
        """
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
        """The next combination, or None once every combination was proposed.

        Examples
        --------
        >>> from sketchcore.tuner import GridSearch
        >>> search = GridSearch()
        >>> search.initialize({"rank": [4]})
        >>> search.get_next_params(), search.get_next_params()
        ({'rank': 4}, None)
        """
        params = next(self._grid, None)
        self._finished = params is None
        return params

    def is_finished(self) -> bool:
        """Whether :meth:`get_next_params` has returned None.

        Examples
        --------
        >>> from sketchcore.tuner import GridSearch
        >>> search = GridSearch()
        >>> search.initialize({"rank": [4]})
        >>> _ = search.get_next_params(); before = search.is_finished(); _ = search.get_next_params()
        >>> before, search.is_finished()
        (False, True)
        """
        return self._finished
