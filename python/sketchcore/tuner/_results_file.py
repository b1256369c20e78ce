"""Saving and loading tuning results: a pickle for ``.pkl``/``.pickle`` names (Panther's format,
readable by ``pickle.load``; Panther's own pickles load too), JSON for any other name."""
from __future__ import annotations

import json
import os
import pickle
import warnings
from typing import TYPE_CHECKING, Any, Optional, Union

import torch
from torch import nn

from sketchcore.tuner._candidates import candidates
from sketchcore.tuner._safe_pickle import PantherStub, safe_load, stub_state_dict

if TYPE_CHECKING:
    from sketchcore.tuner._tuner import SKAutoTuner

_FORMAT = "sketchcore.tuner/1"
PICKLE_SUFFIXES = (".pkl", ".pickle")
_FORMATS = ("a pickle (what save_tuning_results writes for .pkl/.pickle names, and what Panther writes) or JSON "
            "(what it writes for any other name)")


def _is_pickle(path: str) -> bool:
    return os.path.splitext(path)[1].lower() in PICKLE_SUFFIXES


def _read(path: str) -> tuple[Any, bool]:
    """The file's data, and whether it was a pickle (told by its first byte: protocol ≥ 2) or JSON."""
    with open(path, "rb") as f:
        head = f.read(1)
        f.seek(0)
        if head == b"\x80":
            try:
                return safe_load(f), True
            except Exception as error:  # noqa: BLE001 - any failure of a corrupt or foreign pickle
                raise ValueError(f"SKAutoTuner.load_tuning_results: {path!r}: expected {_FORMATS}; it is a pickle "
                                 f"that could not be read ({type(error).__name__}: {error})") from None
        raw = f.read()
    try:
        return json.loads(raw.decode("utf-8")), False
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"SKAutoTuner.load_tuning_results: {path!r}: expected {_FORMATS}, got neither "
                         f"({type(error).__name__}: {error})") from None


def _saved_tensors(layer: Any) -> Optional[dict[str, torch.Tensor]]:
    if isinstance(layer, nn.Module):
        return dict(layer.state_dict())
    if isinstance(layer, PantherStub):
        return stub_state_dict(layer) or None
    return None


class ResultsFileMixin:
    """The results-file methods of :class:`SKAutoTuner` (Panther's names)."""

    def save_tuning_results(self: SKAutoTuner, file_path: Union[str, os.PathLike[str]]) -> None:
        """Writes the results, the best parameters and the evaluation history (parent
        directories are created).

        A ``.pkl`` or ``.pickle`` name gives a pickle of Panther's layout, which ``pickle.load``
        reads (``"results"``, ``"best_params"`` with the chosen layers as modules, ``"config"``),
        plus ``"history"``, ``"evaluations"``, ``"dense_accuracy"`` and ``"final_accuracy"``. Any
        other name gives JSON of the same without the modules (no pickle); loading rebuilds them.

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
        >>> import os, pickle, tempfile, torch
        >>> from torch import nn
        >>> from sketchcore.tuner import LayerConfig, SKAutoTuner
        >>> _ = torch.manual_seed(0)
        >>> model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
        >>> tuner = SKAutoTuner(model, LayerConfig({"type": "Linear"}), lambda m: 1.0, accuracy_threshold=0.5)
        >>> _ = tuner.tune()
        >>> with tempfile.TemporaryDirectory() as directory:
        ...     path = os.path.join(directory, "runs", "best_config.pkl")
        ...     tuner.save_tuning_results(path)
        ...     with open(path, "rb") as f:
        ...         data = pickle.load(f)
        >>> type(data["best_params"]["0"]["best_layer"]).__name__
        'LowRankLinear'
        """
        path = os.fspath(file_path)
        as_pickle = _is_pickle(path)
        best = {name: {"params": d["params"], "copy_weights": d["copy_weights"],
                       **({"best_layer": d.get("best_layer")} if as_pickle else {})}
                for name, d in self.best_params.items()}
        data = {"format": _FORMAT, "results": self.results, "best_params": best,
                "config": self.configs if as_pickle else repr(self.configs), "history": self.history,
                "evaluations": self.evaluations, "dense_accuracy": self.dense_accuracy,
                "final_accuracy": self.final_accuracy}
        directory = os.path.dirname(path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        if as_pickle:
            with open(path, "wb") as f:
                pickle.dump(data, f)
        else:
            with open(path, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=1)
        if self.verbose:
            print(f"[SKAutoTuner] tuning results saved to {path}")

    def load_tuning_results(self: SKAutoTuner, file_path: Union[str, os.PathLike[str]]) -> None:
        """Reads what :meth:`save_tuning_results` wrote — or Panther's pickle — and rebuilds the
        chosen layers from this tuner's model, so :meth:`apply_best_params` works.

        The format is read from the file itself (a pickle or JSON). Pickles are read with a
        restricted unpickler: only the tuner's classes, sketchcore's and Panther's layers and torch
        tensors are built, never other code. Each chosen layer is rebuilt from its parameters and
        the saved layer's tensors are loaded into it (Panther's ``SKLinear`` keeps the same
        names); where they do not fit, a warning says so and the rebuilt layer is kept.

        Parameters
        ----------
        file_path : str or os.PathLike
            A file written by :meth:`save_tuning_results` or Panther's ``save_tuning_results``.

        Raises
        ------
        FileNotFoundError
            ``"SKAutoTuner.load_tuning_results: file_path: '...' not found"``.
        ValueError
            ``"SKAutoTuner.load_tuning_results: '...': expected a pickle (...) or JSON (...), got
            neither (...)"``, a pickle naming other code, ``"...: expected tuning results (a dict with
            'results' and 'best_params')"``, ``"...: expected a file written by
            save_tuning_results (format 'sketchcore.tuner/1')"`` (JSON), ``"...: layer '...' is not
            selected by this tuner's configs"``, or ``"...: layer '...': params {...}: ..."`` for
            parameters the layer does not accept.

        Examples
        --------
        >>> import os, tempfile, torch
        >>> from torch import nn
        >>> from sketchcore.tuner import LayerConfig, SKAutoTuner
        >>> _ = torch.manual_seed(0)
        >>> model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
        >>> tuner = SKAutoTuner(model, LayerConfig({"type": "Linear"}), lambda m: 1.0, accuracy_threshold=0.5)
        >>> _ = tuner.tune()
        >>> fresh = SKAutoTuner(model, LayerConfig({"type": "Linear"}), lambda m: 1.0, accuracy_threshold=0.5)
        >>> with tempfile.TemporaryDirectory() as directory:
        ...     path = os.path.join(directory, "tuning.json")
        ...     tuner.save_tuning_results(path)
        ...     fresh.load_tuning_results(path)
        >>> fresh.get_best_params()["0"]["params"], type(fresh.apply_best_params()[0]).__name__
        ({'rank': 16}, 'LowRankLinear')
        >>> fresh.load_tuning_results("no/such/file.json")
        Traceback (most recent call last):
            ...
        FileNotFoundError: SKAutoTuner.load_tuning_results: file_path: 'no/such/file.json' not found
        """
        path = os.fspath(file_path)
        if not os.path.exists(path):
            raise FileNotFoundError(f"SKAutoTuner.load_tuning_results: file_path: {path!r} not found")
        data, pickled = _read(path)
        where = f"SKAutoTuner.load_tuning_results: {path!r}"
        if not pickled and (not isinstance(data, dict) or data.get("format") != _FORMAT):
            raise ValueError(f"{where}: expected a file written by save_tuning_results (format {_FORMAT!r})")
        if not isinstance(data, dict) or not isinstance(data.get("results"), dict) or not isinstance(
                data.get("best_params"), dict):
            raise ValueError(f"{where}: expected tuning results (a dict with 'results' and 'best_params')")
        selected = {name: config.copy_weights for config in self.configs for name in config.layer_names}
        best = {}
        for name, entry in data["best_params"].items():
            if name not in selected:
                raise ValueError(f"{where}: layer {name!r} is not selected by this tuner's configs "
                                 f"(they select {sorted(selected)})")
            if not isinstance(entry, dict) or "params" not in entry:
                raise ValueError(f"{where}: best_params[{name!r}]: expected a dict with 'params', got {entry!r}")
            copy_weights = bool(entry.get("copy_weights", selected[name]))
            module = None if entry["params"] is None else self._rebuild(where, name, entry, copy_weights)
            best[name] = {"params": entry["params"], "copy_weights": copy_weights, "best_layer": module}
        self.results, self.best_params = data["results"], best
        self.history, self.evaluations = data.get("history", []), data.get("evaluations", 0)
        self.dense_accuracy, self.final_accuracy = data.get("dense_accuracy"), data.get("final_accuracy")
        if self.verbose:
            print(f"[SKAutoTuner] tuning results loaded from {path}")

    def _rebuild(self: SKAutoTuner, where: str, name: str, entry: dict[str, Any], copy_weights: bool) -> nn.Module:
        """The layer ``entry["params"]`` gives ``name``, with the saved layer's tensors where they fit."""
        params = entry["params"]
        if not isinstance(params, dict) or not params:
            raise ValueError(f"{where}: layer {name!r}: params: expected a non-empty dict or None, got {params!r}")
        try:
            found = candidates(self.layer_map[name], name, {key: [value] for key, value in params.items()},
                               copy_weights)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{where}: layer {name!r}: params {params}: {error}") from None
        module = found[0].build()
        module.train(self.layer_map[name].training)
        saved = _saved_tensors(entry.get("best_layer"))
        if saved:
            try:
                module.load_state_dict(saved, strict=True)
            except (RuntimeError, KeyError, ValueError) as error:
                warnings.warn(f"{where}: layer {name!r}: the saved layer's tensors do not fit {type(module).__name__} "
                              f"({str(error).splitlines()[0]}); kept the layer rebuilt from params {params}",
                              UserWarning, stacklevel=3)
        return module
