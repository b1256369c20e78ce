"""``SpectralSearch``: the tuner's default search, spending model evaluations only where the
layers' spectra leave the answer open (the algorithm: ``DEVNOTES.md``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from sketchcore.torch._common import positive_int
from sketchcore.tuner._candidates import Candidate

#: an assignment: for each unit, the index of its option, or None for the dense layer(s)
Assignment = tuple[Optional[int], ...]


@dataclass
class Option:
    """A setting of a unit: total size, worst error (None without a spectrum), per-layer candidates."""

    params: dict
    size: int
    error: Optional[float]
    members: list[Candidate] = field(default_factory=list)


@dataclass
class Unit:
    """One layer, or a ``separate=False`` group sharing a setting; ``key`` names its results."""

    names: list[str]
    dense_size: int
    options: list[Option]  # smallest first
    dense_kind: str = ""  # the dense layers' class name

    def size(self, index: Optional[int]) -> int:
        return self.dense_size if index is None else self.options[index].size

    @property
    def key(self) -> str:
        return "_".join(self.names)

    def kind(self, index: Optional[int]) -> str:
        """The class name of the layers at ``index`` (the dense class for None)."""
        return self.dense_kind if index is None else self.options[index].members[0].kind


class BudgetExhausted(Exception):
    """The evaluation budget is spent; the search returns what it has."""


class SpectralSearch:
    """The spectrum-guided search, :class:`SKAutoTuner`'s default ``search_algorithm``: each
    layer's error-vs-size curve is read off its (whitened) spectrum, and the model is evaluated
    only to place one global tolerance and refine it per layer.

    Parameters
    ----------
    max_evaluations : int, default 60
        Most calls of the accuracy function (each evaluation makes ``num_runs_per_param``), ≥ 1.
    refine : bool, default True
        Run the per-layer refinement after the global bisection.
    data_aware : bool, default True
        Error curves of the layers' outputs on the inputs captured while the dense model was
        evaluated, and whitened factors for Linear layers (True); or of their weights (False).

    Raises
    ------
    ValueError
        ``"SpectralSearch: max_evaluations: expected an integer ≥ 1, got ..."``.
    TypeError
        ``"SpectralSearch: refine: expected a bool, got ..."`` (likewise ``data_aware``).

    Examples
    --------
    >>> import torch
    >>> from torch import nn
    >>> from sketchcore.tuner import LayerConfig, SKAutoTuner, SpectralSearch
    >>> _ = torch.manual_seed(0)
    >>> model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
    >>> calls = []
    >>> tuner = SKAutoTuner(model, LayerConfig({"type": "Linear"}), lambda m: calls.append(1) or 1.0,
    ...                     accuracy_threshold=0.5, search_algorithm=SpectralSearch(max_evaluations=10, refine=False))
    >>> best = tuner.tune()
    >>> len(calls) <= 10, len(calls) == tuner.evaluations
    (True, True)
    """

    #: The global bisection stops once its feasible and infeasible models differ by at most this
    #: fraction of the feasible one's size (the refinement places the rest).
    GLOBAL_GAP = 0.05
    #: Probes below a layer's bisected boundary, stopped after this many failures in a row.
    PROBES = 2
    #: How many options larger a layer may grow in a trade (see ``_trade``).
    TRADE_STEPS = (1, 2)

    def __init__(self, max_evaluations: int = 60, refine: bool = True, data_aware: bool = True) -> None:
        self.max_evaluations = positive_int(max_evaluations, "max_evaluations", "SpectralSearch")
        for name, flag in (("refine", refine), ("data_aware", data_aware)):
            if not isinstance(flag, bool):
                raise TypeError(f"SpectralSearch: {name}: expected a bool, got {type(flag).__name__}")
        self.refine, self.data_aware = refine, data_aware

    @property
    def study(self) -> None:
        """AttributeError ``"SpectralSearch has no Optuna study: ..."`` (Panther code reads
        ``tuner.search_algorithm.study``), saying what to use instead."""
        raise AttributeError("SpectralSearch has no Optuna study: pass search_algorithm=OptunaSearch(...) for "
                             "Panther's Optuna search, or read tuner.history and tuner.get_results_dataframe() for "
                             "this one's evaluations")

    def run(self, units: list[Unit], feasible: Callable[[Assignment], bool]) -> Assignment:
        """The assignment found; ``feasible`` evaluates the model (raising BudgetExhausted when
        the budget is spent) and says whether it met the threshold."""
        spectral = [i for i, u in enumerate(units) if u.options and all(o.error is not None for o in u.options)]
        current: list[Optional[int]] = [None] * len(units)
        try:
            current = self._global_tolerance(units, spectral, feasible, current)
            if self.refine:
                for i in sorted(spectral, key=lambda i: -units[i].size(current[i])):
                    current[i] = self._shrink(units, i, current, feasible)
                current = self._trade(units, spectral, current, feasible)
            for i, unit in enumerate(units):
                if i not in spectral and unit.options:
                    current[i] = self._cheapest(units, i, current, feasible)
        except BudgetExhausted:
            pass
        return tuple(current)

    @staticmethod
    def _at(units: list[Unit], spectral: list[int], tau: float, base: list[Optional[int]]) -> list[Optional[int]]:
        out = list(base)
        for i in spectral:
            fits = [j for j, o in enumerate(units[i].options) if o.error is not None and o.error <= tau]
            out[i] = min(fits, key=lambda j: units[i].options[j].size) if fits else None
        return out

    def _global_tolerance(self, units: list[Unit], spectral: list[int], feasible: Callable[[Assignment], bool],
                          base: list[Optional[int]]) -> list[Optional[int]]:
        breakpoints = sorted({o.error for i in spectral for o in units[i].options if o.error is not None})
        lo, hi = -1, len(breakpoints)  # lo: known feasible (−1: all dense), hi: known infeasible
        best = list(base)
        infeasible_size = 0
        while hi - lo > 1:
            mid = (lo + hi) // 2
            trial = self._at(units, spectral, breakpoints[mid], base)
            if feasible(tuple(trial)):
                lo, best = mid, trial
            else:
                hi, infeasible_size = mid, sum(u.size(i) for u, i in zip(units, trial))
            best_size = sum(u.size(i) for u, i in zip(units, best))
            if best_size - infeasible_size <= self.GLOBAL_GAP * best_size:
                break  # close enough: the per-layer refinement places the rest
        return best

    def _shrink(self, units: list[Unit], i: int, current: list[Optional[int]],
                feasible: Callable[[Assignment], bool]) -> Optional[int]:
        """The smallest option of unit i keeping the model feasible, the others fixed: a bisection,
        then probes below it (measured accuracy is not exactly monotone in the size)."""
        top = len(units[i].options) if current[i] is None else current[i]  # index `len` stands for dense
        trial = list(current)
        hi = _lowest_feasible(trial, i, top, feasible)  # the current state (top) is feasible
        below = self._probe_below(trial, i, hi - 2, feasible)
        hi = hi if below is None else below
        return None if hi == len(units[i].options) else hi

    def _probe_below(self, trial: list[Optional[int]], i: int, start: int,
                     feasible: Callable[[Assignment], bool]) -> Optional[int]:
        """The lowest feasible option from ``start`` down, stopping after ``PROBES`` misses; or None."""
        misses, probe, found = 0, start, None
        while misses < self.PROBES and probe >= 0:
            trial[i] = probe
            if feasible(tuple(trial)):
                found, misses = probe, 0
            else:
                misses += 1
            probe -= 1
        return found

    def _trade(self, units: list[Unit], spectral: list[int], current: list[Optional[int]],
               feasible: Callable[[Assignment], bool]) -> list[Optional[int]]:
        """Grows each other layer ``TRADE_STEPS`` options and probes the largest layer downwards;
        keeps a trade that makes the model smaller (why: ``DEVNOTES.md``)."""
        if len(spectral) < 2:
            return current
        big = max(spectral, key=lambda i: units[i].size(current[i]))
        for j in spectral:
            for step in self.TRADE_STEPS:
                if j == big or current[j] is None or current[j] + step >= len(units[j].options) or current[big] is None:
                    continue
                trial = list(current)
                trial[j] += step  # type: ignore[operator]
                found = self._probe_below(trial, big, current[big] - 1, feasible)  # type: ignore[operator]
                if found is not None:
                    trial[big] = found
                    if sum(u.size(i) for u, i in zip(units, trial)) < sum(u.size(i) for u, i in zip(units, current)):
                        current = trial
        return current

    @staticmethod
    def _cheapest(units: list[Unit], i: int, current: list[Optional[int]],
                  feasible: Callable[[Assignment], bool]) -> Optional[int]:
        """Options without a spectrum: the cheapest feasible one, or dense if none is."""
        trial = list(current)
        trial[i] = len(units[i].options) - 1
        if not feasible(tuple(trial)):
            return None
        return _lowest_feasible(trial, i, len(units[i].options) - 1, feasible)


def _lowest_feasible(trial: list[Optional[int]], i: int, hi: int, feasible: Callable[[Assignment], bool]) -> int:
    """The lowest feasible option of unit i by bisection below ``hi`` (known feasible)."""
    lo = -1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        trial[i] = mid
        if feasible(tuple(trial)):
            hi = mid
        else:
            lo = mid
    return hi
