"""``OptunaSearch``: Panther's default black-box search (TPE through Optuna, an optional
dependency: ``pip install optuna``)."""
from __future__ import annotations

from typing import Any, Mapping, Optional

from sketchcore.tuner._params import Categorical, Float, Int, choices
from sketchcore.tuner._search import SearchAlgorithm, _check_trials


class OptunaSearch(SearchAlgorithm):
    """``n_trials`` trials of an Optuna study (TPE sampler, seeded by ``seed``, unless
    ``sampler`` is given). Raises ImportError with the install command when Optuna is absent.

    Parameters
    ----------
    n_trials : int, default 100
        Number of trials, ≥ 1.
    sampler : optuna.samplers.BaseSampler, optional
        Optuna sampler; default ``TPESampler(seed=seed)``.
    direction : {"maximize", "minimize"}, default "maximize"
        The study's direction (the tuner's scores are to be maximized).
    study_name, storage : str, optional
        Optuna study name (default ``"skautotuner_study"``) and storage URL (default in memory).
    load_if_exists : bool, default False
        Resume a stored study of the same name.
    seed : int, optional
        Seed of the default TPE sampler.

    Raises
    ------
    ImportError
        ``"OptunaSearch needs Optuna, an optional dependency: pip install optuna"``.
    ValueError
        ``"OptunaSearch: direction: expected 'maximize' or 'minimize', got ..."`` or
        ``"OptunaSearch: n_trials: expected an integer ≥ 1, got ..."``.

    Examples
    --------
    >>> from sketchcore.tuner import Int, OptunaSearch
    >>> search = OptunaSearch(n_trials=3, seed=0)
    >>> search.initialize({"rank": Int(1, 8)})
    >>> while (params := search.get_next_params()) is not None:
    ...     search.update(params, -params["rank"])
    >>> len(search.history), search.is_finished(), 1 <= search.get_best_params()["rank"] <= 8
    (3, True, True)
    """

    def __init__(self, n_trials: int = 100, sampler: Any = None, direction: str = "maximize",
                 study_name: Optional[str] = None, storage: Optional[str] = None, load_if_exists: bool = False,
                 seed: Optional[int] = None) -> None:
        try:
            import optuna
        except ImportError:
            raise ImportError("OptunaSearch needs Optuna, an optional dependency: pip install optuna") from None
        if direction not in ("maximize", "minimize"):
            raise ValueError(f"OptunaSearch: direction: expected 'maximize' or 'minimize', got {direction!r}")
        self._optuna = optuna
        self.n_trials = _check_trials(n_trials, "OptunaSearch")
        self.sampler = sampler if sampler is not None else optuna.samplers.TPESampler(seed=seed)
        self.direction, self.study_name, self.storage = direction, study_name or "skautotuner_study", storage
        self.load_if_exists, self.seed = load_if_exists, seed

    def initialize(self, param_space: Mapping[str, Any]) -> None:
        """Creates the Optuna study over ``param_space``; see the class example."""
        super().initialize(param_space)
        self._optuna.logging.set_verbosity(self._optuna.logging.WARNING)
        self._study = self._optuna.create_study(sampler=self.sampler, direction=self.direction,
                                                study_name=self.study_name, storage=self.storage,
                                                load_if_exists=self.load_if_exists)
        self._trial: Any = None
        self._count = 0

    def _suggest(self, trial: Any, name: str, spec: Any) -> Any:
        if isinstance(spec, Int):
            return trial.suggest_int(name, spec.low, spec.high, step=spec.step, log=spec.log)
        if isinstance(spec, Float):
            return trial.suggest_float(name, spec.low, spec.high, step=spec.step, log=spec.log)
        values = choices(spec if not isinstance(spec, Categorical) else spec, name)
        return trial.suggest_categorical(name, values)

    def get_next_params(self) -> Optional[dict[str, Any]]:
        """Asks the study for the next trial's parameters, or None after ``n_trials``; see the
        class example."""
        if self._count >= self.n_trials:
            return None
        self._count += 1
        self._trial = self._study.ask()
        return {name: self._suggest(self._trial, name, spec) for name, spec in self.param_space.items()}

    def update(self, params: Mapping[str, Any], score: float) -> None:
        """Records the score and tells the study (an infinite score is told as a failed trial);
        see the class example."""
        super().update(params, score)
        if self._trial is not None:  # TPE cannot learn from -inf: infeasible trials are told as failed
            finite = score not in (float("inf"), float("-inf"))
            state = self._optuna.trial.TrialState.COMPLETE if finite else self._optuna.trial.TrialState.FAIL
            self._study.tell(self._trial, float(score) if finite else None, state=state)
            self._trial = None

    def is_finished(self) -> bool:
        """Whether ``n_trials`` trials were asked; see the class example."""
        return self._count >= self.n_trials
