"""``OptunaSearch``: Panther's default black-box search (TPE through Optuna, an optional dependency)."""
from __future__ import annotations

import copy
from typing import Any, Mapping, Optional

from sketchcore.tuner._params import Float, Int, choices
from sketchcore.torch._common import positive_int
from sketchcore.tuner._search import SearchAlgorithm


class OptunaSearch(SearchAlgorithm):
    """``n_trials`` trials of a new Optuna study per :meth:`initialize` (once per layer or group),
    named ``study_name``, then ``study_name_1``, ``study_name_2``, ... so that a ``storage`` holds
    one study per layer. :meth:`load_state` reloads the study from a ``storage``; without one a
    fresh study goes on (as in Panther).

    Parameters
    ----------
    n_trials : int, default 100
        Trials per :meth:`initialize`, ≥ 1.
    sampler : optuna.samplers.BaseSampler, optional
        Default ``TPESampler(seed=seed)``; each study after the first gets a fresh copy.
    direction : {"maximize", "minimize"}, default "maximize"
        The study's direction (the tuner's scores are to be maximized).
    study_name, storage : str, optional
        Optuna study name (default ``"skautotuner_study"``) and storage URL (default in memory).
    load_if_exists : bool, default False
        Resume stored studies of the same names.
    seed : int, optional
        Seed of the default TPE sampler.

    Attributes
    ----------
    studies : list of optuna.Study
        Every study made, in order.

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
    >>> len(search.study.trials), search.get_trials_dataframe().shape[0]
    (3, 3)
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
        self.n_trials = positive_int(n_trials, "n_trials", "OptunaSearch")
        self.sampler = sampler if sampler is not None else optuna.samplers.TPESampler(seed=seed)
        try:  # samplers cache what they learn of one study (TPE refuses a second): later studies get fresh copies
            self._pristine: Any = copy.deepcopy(self.sampler)
        except Exception:  # noqa: BLE001 - a sampler that cannot be copied is shared, as in Panther
            self._pristine = None
        self.direction, self.study_name, self.storage = direction, study_name or "skautotuner_study", storage
        self.load_if_exists, self.seed = load_if_exists, seed
        self.studies: list[Any] = []
        self._study: Any = None
        self._trial: Any = None
        self._count = 0
        self._exhausted = False

    @property
    def study(self) -> Any:
        """The Optuna study of the latest :meth:`initialize` (None before)."""
        return self._study

    def initialize(self, param_space: Mapping[str, Any]) -> None:
        super().initialize(param_space)
        self._optuna.logging.set_verbosity(self._optuna.logging.WARNING)
        name = self.study_name if not self.studies else f"{self.study_name}_{len(self.studies)}"
        sampler = self.sampler if not self.studies or self._pristine is None else copy.deepcopy(self._pristine)
        self._study = self._optuna.create_study(sampler=sampler, direction=self.direction, study_name=name,
                                                storage=self.storage, load_if_exists=self.load_if_exists)
        self.studies.append(self._study)
        self._trial, self._count, self._exhausted = None, 0, False

    def _suggest(self, trial: Any, name: str, spec: Any) -> Any:
        if isinstance(spec, Int):
            return trial.suggest_int(name, spec.low, spec.high, step=spec.step, log=spec.log)
        if isinstance(spec, Float):
            return trial.suggest_float(name, spec.low, spec.high, step=spec.step, log=spec.log)
        return trial.suggest_categorical(name, choices(spec, name))

    def _ready(self, method: str) -> None:
        if self._study is None:
            raise RuntimeError(f"OptunaSearch.{method}: the search is not initialized; call initialize(param_space) "
                               "first")

    def get_next_params(self) -> Optional[dict[str, Any]]:
        """The next trial's parameters, or None once finished (RuntimeError before :meth:`initialize`)."""
        self._ready("get_next_params")
        if self.is_finished():
            return None
        self._count += 1
        self._trial = self._study.ask()
        return {name: self._suggest(self._trial, name, spec) for name, spec in self.param_space.items()}

    def update(self, params: Mapping[str, Any], score: float) -> None:
        """Records the score and tells the study (RuntimeError before :meth:`initialize` or
        without a pending trial)."""
        self._ready("update")
        if self._trial is None:
            raise RuntimeError("OptunaSearch.update: no pending trial; call get_next_params() first")
        super().update(params, score)
        trial, self._trial = self._trial, None
        try:
            self._study.tell(trial, float(score))
        except RuntimeError as error:  # GridSampler stops the study when its grid is done (the trial is stored)
            if "stop" not in str(error):
                raise
            self._exhausted = True

    def is_finished(self) -> bool:
        """Whether ``n_trials`` trials were asked, or a ``GridSampler`` tried its whole grid."""
        return self._count >= self.n_trials or self._exhausted

    def get_trials_dataframe(self) -> Any:
        """``study.trials_dataframe()``, or None before :meth:`initialize`."""
        return None if self._study is None else self._study.trials_dataframe()

    def set_user_attr(self, key: str, value: Any) -> None:
        """Sets a user attribute on the pending trial (none: nothing happens)."""
        if self._trial is not None:
            self._trial.set_user_attr(key, value)

    def report_intermediate(self, value: float, step: int) -> None:
        """Reports an intermediate value of the pending trial to the pruner (none: nothing happens)."""
        if self._trial is not None:
            self._trial.report(value, step)

    def should_prune(self) -> bool:
        """Whether the study's pruner would stop the pending trial (False when none is pending)."""
        return bool(self._trial.should_prune()) if self._trial is not None else False

    def _state(self) -> dict[str, Any]:
        return {**super()._state(), "n_trials": self.n_trials, "direction": self.direction,
                "study_name": self.study_name, "storage": self.storage, "seed": self.seed,
                "load_if_exists": self.load_if_exists, "count": self._count, "studies": len(self.studies),
                "current": None if self._study is None else self._study.study_name}

    def _restore(self, state: Mapping[str, Any]) -> None:
        super()._restore(state)
        self.n_trials, self.direction, self.study_name = state["n_trials"], state["direction"], state["study_name"]
        self.storage, self.seed, self.load_if_exists = state["storage"], state["seed"], state["load_if_exists"]
        self._count, self._trial, self._exhausted = state["count"], None, False
        name = state["current"] or self.study_name
        sampler = copy.deepcopy(self._pristine) if self._pristine is not None else self.sampler
        if self.storage:
            self._study = self._optuna.load_study(study_name=name, storage=self.storage, sampler=sampler)
        else:  # an in-memory study's trials are not in the file (as in Panther): a fresh study goes on
            self._study = self._optuna.create_study(sampler=sampler, direction=self.direction, study_name=name)
        self.studies = [self._study]
