"""Panther's black-box search interface (``initialize`` / ``get_next_params`` / ``update``) and
two plain searches over it: every trial is one full evaluation of the model."""
from __future__ import annotations

import os
import pickle
import random
from typing import Any, Mapping, Optional, Union

from sketchcore.torch._common import positive_int
from sketchcore.tuner._params import Float, Int, choices, grid

_STATE_FORMAT = "sketchcore.tuner.search/1"


class SearchAlgorithm:
    """Base class of black-box searches (Panther's interface): :meth:`initialize` with a space,
    then :meth:`get_next_params` (None when done) and :meth:`update` with the score (higher is
    better) in turn. Subclasses implement :meth:`get_next_params`.

    Attributes
    ----------
    param_space : dict
        The space of the last :meth:`initialize`.
    history : list of (dict, float)
        Every :meth:`update`: the parameters and their score.
    best_params : dict or None
        The parameters of the highest score so far.
    best_score : float or None
        The highest score so far.

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
        """Starts a search over ``param_space`` (parameter name → list, Categorical, Int or
        Float) and clears the history and the best result."""
        self.param_space = dict(param_space)
        self.best_params: Optional[dict[str, Any]] = None
        self.best_score: Optional[float] = None
        self.history: list[tuple[dict[str, Any], float]] = []

    def get_next_params(self) -> Optional[dict[str, Any]]:
        """The next parameters to evaluate, or None when done (subclasses implement it)."""
        raise NotImplementedError

    def update(self, params: Mapping[str, Any], score: float) -> None:
        """Records ``score`` for ``params`` (``-inf``: infeasible), updating the best result."""
        self.history.append((dict(params), float(score)))
        if self.best_score is None or score > self.best_score:
            self.best_params, self.best_score = dict(params), float(score)

    def get_best_params(self) -> Optional[dict[str, Any]]:
        """``best_params``."""
        return self.best_params

    def get_best_score(self) -> Optional[float]:
        """``best_score``."""
        return self.best_score

    def reset(self) -> None:
        """Starts the search over again on the same parameter space."""
        self.initialize(getattr(self, "param_space", {}))

    def is_finished(self) -> bool:
        """Whether the search has nothing more to propose (False in the base class)."""
        return False

    def _state(self) -> dict[str, Any]:
        """What :meth:`save_state` stores; subclasses with more state extend it (and ``_restore``)."""
        return {"param_space": getattr(self, "param_space", {}), "history": getattr(self, "history", []),
                "best_params": getattr(self, "best_params", None), "best_score": getattr(self, "best_score", None)}

    def _restore(self, state: Mapping[str, Any]) -> None:
        self.param_space, self.history = dict(state["param_space"]), list(state["history"])
        self.best_params, self.best_score = state["best_params"], state["best_score"]

    def save_state(self, filepath: Union[str, os.PathLike[str]]) -> None:
        """Writes the search's state (space, history, best result, position) to ``filepath`` as
        a pickle, for :meth:`load_state`."""
        with open(filepath, "wb") as f:
            pickle.dump({"format": _STATE_FORMAT, "class": type(self).__name__, "state": self._state()}, f)

    def load_state(self, filepath: Union[str, os.PathLike[str]]) -> None:
        """Restores what :meth:`save_state` wrote (same class; restricted unpickler), so the search
        goes on where it stood. FileNotFoundError for a missing file; ValueError
        ``"<Class>.load_state: '...': expected a state saved by <Class>.save_state, got ..."``."""
        from sketchcore.tuner._safe_pickle import safe_load

        name = type(self).__name__
        with open(filepath, "rb") as f:
            try:
                data = safe_load(f)
            except Exception as error:  # noqa: BLE001 - a corrupt or foreign file
                data = f"an unreadable file ({type(error).__name__}: {error})"
        if not isinstance(data, dict) or data.get("format") != _STATE_FORMAT or data.get("class") != name:
            got = f"a state of {data.get('class')}" if isinstance(data, dict) and "class" in data else str(data)[:120]
            raise ValueError(f"{name}.load_state: {os.fspath(filepath)!r}: expected a state saved by "
                             f"{name}.save_state, got {got}")
        self._restore(data["state"])


class RandomSearch(SearchAlgorithm):
    """``n_trials`` seeded uniform draws from the space (log-uniform for ``log=True``).

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
        self.n_trials = positive_int(n_trials, "n_trials", "RandomSearch")
        self.seed = seed

    def initialize(self, param_space: Mapping[str, Any]) -> None:
        super().initialize(param_space)
        self._random = random.Random(self.seed)
        self._drawn = 0

    def _state(self) -> dict[str, Any]:
        return {**super()._state(), "n_trials": self.n_trials, "seed": self.seed, "drawn": self._drawn,
                "random": self._random.getstate()}

    def _restore(self, state: Mapping[str, Any]) -> None:
        super()._restore(state)
        self.n_trials, self.seed, self._drawn = state["n_trials"], state["seed"], state["drawn"]
        self._random = random.Random()
        self._random.setstate(state["random"])

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
    """

    def initialize(self, param_space: Mapping[str, Any]) -> None:
        super().initialize(param_space)
        self._grid = grid(self.param_space, "GridSearch: {name}: a continuous Float has no grid; expected a list or "
                                            "a step")
        self._position = 0

    def get_next_params(self) -> Optional[dict[str, Any]]:
        if self._position >= len(self._grid):
            self._position = len(self._grid) + 1  # asked past the end: finished
            return None
        self._position += 1
        return dict(self._grid[self._position - 1])

    def is_finished(self) -> bool:
        return self._position > len(self._grid)

    def _state(self) -> dict[str, Any]:
        return {**super()._state(), "grid": self._grid, "position": self._position}

    def _restore(self, state: Mapping[str, Any]) -> None:
        super()._restore(state)
        self._grid, self._position = list(state["grid"]), state["position"]
