"""What the tuner hands back: applying the choice, replacing without tuning, the results table,
and saving/loading them (JSON: the chosen parameters, rebuilt into layers on load — no pickle)."""
from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, Union

from torch import nn

from sketchcore.tuner._params import choices
from sketchcore.tuner._units import build_units

if TYPE_CHECKING:
    from sketchcore.tuner._tuner import SKAutoTuner

_FORMAT = "sketchcore.tuner/1"


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
        {'rank': 1}
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
            params = config.params
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
        rows = []
        for name, results in self.results.items():
            for result in results:
                row: dict[str, Any] = {"layer_name": name, "evaluation": result.get("evaluation")}
                row.update(result["params"] or {})
                row.update({key: result.get(key) for key in ("score", "accuracy", "speed", "parameters")})
                rows.append(row)
        return rows

    def get_results_dataframe(self: SKAutoTuner) -> Any:
        """One row per (evaluation, layer): the layer's parameters (none for a dense layer),
        score, accuracy, speed (the optimization function's value, where computed) and the
        model's stored numbers. A pandas DataFrame when pandas is installed, else a list of dicts.

        Returns
        -------
        pandas.DataFrame or list of dict
            Columns ``layer_name``, ``evaluation``, the parameters, ``score``, ``accuracy``,
            ``speed``, ``parameters``; empty before :meth:`tune`.

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
        >>> len(tuner.get_results_dataframe()) > 0
        True
        """
        rows = self._rows()
        try:
            import pandas as pd
        except ImportError:
            return rows
        return pd.DataFrame(rows)

    def save_tuning_results(self: SKAutoTuner, file_path: Union[str, os.PathLike[str]]) -> None:
        """Writes the results, the best parameters and the evaluation history as JSON (parent
        directories are created).

        The layers themselves are not stored: :meth:`load_tuning_results` rebuilds them.

        Parameters
        ----------
        file_path : str or os.PathLike
            Where to write.

        Raises
        ------
        OSError
            When the file or its directory cannot be written.

        Examples
        --------
        >>> import torch
        >>> from torch import nn
        >>> from sketchcore.tuner import LayerConfig, SKAutoTuner
        >>> _ = torch.manual_seed(0)
        >>> model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
        >>> tuner = SKAutoTuner(model, LayerConfig({"type": "Linear"}), lambda m: 1.0, accuracy_threshold=0.5)
        >>> import os, tempfile
        >>> _ = tuner.tune()
        >>> with tempfile.TemporaryDirectory() as directory:
        ...     path = os.path.join(directory, "runs", "tuning.json")
        ...     tuner.save_tuning_results(path)
        ...     os.path.exists(path)
        True
        """
        best = {name: {"params": d["params"], "copy_weights": d["copy_weights"]} for name, d in self.best_params.items()}
        data = {"format": _FORMAT, "results": self.results, "best_params": best, "history": self.history,
                "evaluations": self.evaluations, "dense_accuracy": self.dense_accuracy,
                "final_accuracy": self.final_accuracy, "configs": repr(self.configs)}
        directory = os.path.dirname(os.fspath(file_path))
        if directory:
            os.makedirs(directory, exist_ok=True)
        with open(file_path, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)
        if self.verbose:
            print(f"[SKAutoTuner] tuning results saved to {file_path}")

    def load_tuning_results(self: SKAutoTuner, file_path: Union[str, os.PathLike[str]]) -> None:
        """Reads what :meth:`save_tuning_results` wrote and rebuilds the chosen layers from this
        tuner's model (so :meth:`apply_best_params` works). Raises FileNotFoundError, or
        ValueError for a file of another format or naming layers this tuner does not select.

        Parameters
        ----------
        file_path : str or os.PathLike
            A file written by :meth:`save_tuning_results`.

        Raises
        ------
        FileNotFoundError
            ``"SKAutoTuner.load_tuning_results: file_path: '...' not found"``.
        ValueError
            ``"SKAutoTuner.load_tuning_results: '...' is not JSON (...)"``, ``"...: expected a file
            written by save_tuning_results (format 'sketchcore.tuner/1')"``, or ``"...: layer '...'
            with params {...} is not in this tuner's search space"``.

        Examples
        --------
        >>> import torch
        >>> from torch import nn
        >>> from sketchcore.tuner import LayerConfig, SKAutoTuner
        >>> _ = torch.manual_seed(0)
        >>> model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
        >>> tuner = SKAutoTuner(model, LayerConfig({"type": "Linear"}), lambda m: 1.0, accuracy_threshold=0.5)
        >>> import os, tempfile
        >>> _ = tuner.tune()
        >>> fresh = SKAutoTuner(model, LayerConfig({"type": "Linear"}), lambda m: 1.0, accuracy_threshold=0.5)
        >>> with tempfile.TemporaryDirectory() as directory:
        ...     path = os.path.join(directory, "tuning.json")
        ...     tuner.save_tuning_results(path)
        ...     fresh.load_tuning_results(path)
        >>> fresh.get_best_params()["0"]["params"], type(fresh.apply_best_params()[0]).__name__
        ({'rank': 1}, 'LowRankLinear')
        >>> fresh.load_tuning_results("no/such/file.json")
        Traceback (most recent call last):
            ...
        FileNotFoundError: SKAutoTuner.load_tuning_results: file_path: 'no/such/file.json' not found
        """
        if not os.path.exists(file_path):
            raise FileNotFoundError(f"SKAutoTuner.load_tuning_results: file_path: {os.fspath(file_path)!r} not found")
        with open(file_path, encoding="utf-8") as f:
            try:
                data = json.load(f)
            except json.JSONDecodeError as error:
                raise ValueError(f"SKAutoTuner.load_tuning_results: {os.fspath(file_path)!r} is not JSON ({error})") \
                    from None
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise ValueError(f"SKAutoTuner.load_tuning_results: {os.fspath(file_path)!r}: expected a file written "
                             f"by save_tuning_results (format {_FORMAT!r})")
        options = {}
        for config in self.configs:
            for unit in build_units(self.layer_map, config.layer_names, config.params, config.separate,
                                    config.copy_weights):
                for option in unit.options:
                    for name, candidate in zip(unit.names, option.members):
                        options[(name, json.dumps(option.params, sort_keys=True))] = candidate
        best = {}
        for name, entry in data["best_params"].items():
            module = None
            if entry["params"] is not None:
                candidate = options.get((name, json.dumps(entry["params"], sort_keys=True)))
                if candidate is None:
                    raise ValueError(f"SKAutoTuner.load_tuning_results: layer {name!r} with params {entry['params']} "
                                     "is not in this tuner's search space")
                module = candidate.build()
                module.train(self.layer_map[name].training)
            best[name] = {"params": entry["params"], "copy_weights": entry["copy_weights"], "best_layer": module}
        self.results, self.best_params = data["results"], best
        self.history, self.evaluations = data.get("history", []), data.get("evaluations", 0)
        self.dense_accuracy, self.final_accuracy = data.get("dense_accuracy"), data.get("final_accuracy")
        if self.verbose:
            print(f"[SKAutoTuner] tuning results loaded from {file_path}")
