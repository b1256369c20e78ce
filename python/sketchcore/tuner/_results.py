"""What the tuner hands back: applying the choice, replacing without tuning, and the results
table (saving and loading them: ``_results_file``)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import nn

from sketchcore.tuner._params import choices
from sketchcore.tuner._units import build_units

if TYPE_CHECKING:
    from sketchcore.tuner._tuner import SKAutoTuner

#: Panther's parameter columns, present in every results table (empty where a layer class has
#: no such parameter, e.g. the LowRankLinear that params="auto" chooses for an nn.Linear).
PANTHER_COLUMNS = ("num_terms", "low_rank")


def _set(model: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent_name) if parent_name else model, child, module)


class ResultsMixin:
    """The result methods of :class:`SKAutoTuner` (Panther's names)."""

    def apply_best_params(self: SKAutoTuner) -> nn.Module:
        """Puts the chosen layers into the model (in place) and returns it; layers whose choice
        is None stay dense. Raises RuntimeError before :meth:`tune` or :meth:`load_tuning_results`.

        Returns
        -------
        torch.nn.Module
            The tuner's model, changed in place.

        Raises
        ------
        RuntimeError
            ``"SKAutoTuner.apply_best_params: no tuning results yet; call tune() or
            load_tuning_results() first"``.

        Examples
        --------
        >>> import torch
        >>> from torch import nn
        >>> from sketchcore.tuner import LayerConfig, SKAutoTuner
        >>> _ = torch.manual_seed(0)
        >>> model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
        >>> tuner = SKAutoTuner(model, LayerConfig({"type": "Linear"}), lambda m: 1.0, accuracy_threshold=0.5)
        >>> _ = tuner.tune()
        >>> tuner.apply_best_params() is model, type(model[2]).__name__
        (True, 'LowRankLinear')
        """
        if not self.best_params:
            raise RuntimeError("SKAutoTuner.apply_best_params: no tuning results yet; call tune() or "
                               "load_tuning_results() first")
        for name, data in self.best_params.items():
            if data.get("best_layer") is not None:
                _set(self.model, name, data["best_layer"])
        return self.model

    def get_best_params(self: SKAutoTuner) -> dict[str, dict[str, Any]]:
        """The choice of the last :meth:`tune` or :meth:`load_tuning_results` (empty before).

        Returns
        -------
        dict
            Layer name → ``{"params": dict or None, "copy_weights": bool, "best_layer": module or None}``.

        Examples
        --------
        >>> import torch
        >>> from torch import nn
        >>> from sketchcore.tuner import LayerConfig, SKAutoTuner
        >>> _ = torch.manual_seed(0)
        >>> model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
        >>> tuner = SKAutoTuner(model, LayerConfig({"type": "Linear"}), lambda m: 1.0, accuracy_threshold=0.5)
        >>> tuner.get_best_params()
        {}
        >>> _ = tuner.tune()
        >>> tuner.get_best_params()["0"]["params"]
        {'rank': 16}
        """
        return self.best_params

    def replace_without_tuning(self: SKAutoTuner, tolerance: float = 0.1) -> nn.Module:
        """Replaces every selected layer without evaluating the model and returns it. Explicit
        params: the first value of each (Panther's rule). ``params="auto"``: the smallest setting
        whose relative weight error (from the layer's spectrum) is ≤ ``tolerance``, or the most
        accurate setting for layers without a spectrum (attention).

        A layer for which no setting meets ``tolerance`` and saves numbers stays dense.

        Parameters
        ----------
        tolerance : float, default 0.1
            Relative weight error allowed, in [0, 1).

        Returns
        -------
        torch.nn.Module
            The tuner's model, changed in place.

        Raises
        ------
        ValueError
            ``"SKAutoTuner.replace_without_tuning: tolerance: expected a number in [0, 1), got ..."``.

        Examples
        --------
        >>> import torch
        >>> from torch import nn
        >>> from sketchcore.tuner import LayerConfig, SKAutoTuner
        >>> _ = torch.manual_seed(0)
        >>> model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
        >>> calls = []
        >>> tuner = SKAutoTuner(model, LayerConfig("0", {"rank": [4, 8]}), lambda m: calls.append(1) or 1.0)
        >>> tuner.replace_without_tuning()[0], len(calls)
        (LowRankLinear(in_features=64, out_features=64, rank=4, bias=True, activation='none'), 0)
        >>> tuner.replace_without_tuning(tolerance=1.0)
        Traceback (most recent call last):
            ...
        ValueError: SKAutoTuner.replace_without_tuning: tolerance: expected a number in [0, 1), got 1.0
        """
        if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0.0 <= tolerance < 1.0:
            raise ValueError(f"SKAutoTuner.replace_without_tuning: tolerance: expected a number in [0, 1), got "
                             f"{tolerance!r}")
        for config in self.configs:
            params = "auto" if config._auto else config.params
            if params != "auto":
                params = {key: [choices(spec, key)[0]] for key, spec in params.items()}  # type: ignore[index]
            for unit in build_units(self.layer_map, config.layer_names, params, config.separate, config.copy_weights):
                if params != "auto":
                    option = unit.options[0]
                else:
                    fits = [o for o in unit.options if o.error is not None and o.error <= tolerance]
                    if not fits and unit.options[0].error is not None:
                        continue  # no setting meets the tolerance and saves numbers: stays dense
                    option = fits[0] if fits else unit.options[-1]
                for name, candidate in zip(unit.names, option.members):
                    module = candidate.build()
                    module.train(self.layer_map[name].training)
                    _set(self.model, name, module)
        return self.model

    def _rows(self: SKAutoTuner) -> list[dict[str, Any]]:
        keys = list(PANTHER_COLUMNS)
        for results in self.results.values():
            for result in results:
                keys += [k for k in (result.get("params") or {}) if k not in keys]
        rows = []
        for name, results in self.results.items():
            for result in results:
                row: dict[str, Any] = {"layer_name": name}
                row.update({key: (result.get("params") or {}).get(key) for key in keys})
                row.update({key: result.get(key) for key in ("layer_class", "score", "accuracy", "speed", "parameters",
                                                             "evaluation")})
                rows.append(row)
        return rows

    def get_results_dataframe(self: SKAutoTuner) -> Any:
        """One row per (evaluation, layer or ``separate=False`` group): the parameters (empty for
        a dense layer, and where the layer class has no such parameter), the class the setting
        builds, score, accuracy, speed (the optimization function's value, where measured) and the
        model's stored numbers. A pandas DataFrame when pandas is installed, else a list of dicts.

        ``score`` is what the search maximized: the accuracy without a threshold; with one, −∞
        below it, else the optimization function's value or, without that function, minus the
        stored size.

        Returns
        -------
        pandas.DataFrame or list of dict
            Columns ``layer_name`` (a group's names joined by "_", as Panther), Panther's
            ``num_terms`` and ``low_rank``, the other parameters (``rank``, ...),
            ``layer_class``, ``score``, ``accuracy``, ``speed``, ``parameters``, ``evaluation``;
            empty before :meth:`tune`.

        Examples
        --------
        >>> import torch
        >>> from torch import nn
        >>> from sketchcore.tuner import LayerConfig, SKAutoTuner
        >>> _ = torch.manual_seed(0)
        >>> model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
        >>> tuner = SKAutoTuner(model, LayerConfig({"type": "Linear"}), lambda m: 1.0, accuracy_threshold=0.5)
        >>> len(tuner.get_results_dataframe())
        0
        >>> _ = tuner.tune()
        >>> table = tuner.get_results_dataframe()
        >>> list(table.columns)
        ['layer_name', 'num_terms', 'low_rank', 'rank', 'layer_class', 'score', 'accuracy', 'speed',
         'parameters', 'evaluation']
        >>> table["layer_class"].iloc[-1], bool(table["num_terms"].isna().all())
        ('LowRankLinear', True)
        """
        rows = self._rows()
        try:
            import pandas as pd
        except ImportError:
            return rows
        return pd.DataFrame(rows)
