"""Saving and loading tuning results: a pickle for ``.pkl``/``.pickle`` names (Panther's format,
readable by ``pickle.load``; Panther's own pickles load too), JSON for any other name."""
from __future__ import annotations

import json
import os
import pickle
import warnings
from typing import Any, Optional

import torch
from torch import nn

from sketchcore.tuner._candidates import candidates
from sketchcore.tuner._evaluation import built
from sketchcore.tuner._safe_pickle import PantherStub, safe_load, stub_state_dict

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


def _tensor_lists(layer: Any) -> dict[str, Any]:
    """A chosen layer's tensors as nested lists, for JSON: factors computed from the data seen
    while tuning (whitened) cannot be rebuilt from the params alone."""
    if not isinstance(layer, nn.Module):
        return {}
    return {"tensors": {key: value.detach().cpu().tolist() for key, value in layer.state_dict().items()}}


def _saved_tensors(entry: dict[str, Any]) -> Optional[dict[str, torch.Tensor]]:
    """The tensors saved for a chosen layer: a pickled module's, or JSON's lists."""
    if isinstance(entry.get("tensors"), dict):
        return {key: torch.tensor(value, dtype=torch.float64) for key, value in entry["tensors"].items()}
    layer = entry.get("best_layer")
    if isinstance(layer, nn.Module):
        return dict(layer.state_dict())
    if isinstance(layer, PantherStub):
        return stub_state_dict(layer) or None
    return None


def save(path: str, results: dict[str, Any], best_params: dict[str, dict[str, Any]], configs: Any,
         extra: dict[str, Any]) -> None:
    """``SKAutoTuner.save_tuning_results``'s file; ``extra``: history, evaluations, accuracies."""
    as_pickle = _is_pickle(path)
    best = {name: {"params": d["params"], "copy_weights": d["copy_weights"],
                   **({"best_layer": d.get("best_layer")} if as_pickle else _tensor_lists(d.get("best_layer")))}
            for name, d in best_params.items()}
    data = {"format": _FORMAT, "results": results, "best_params": best,
            "config": configs if as_pickle else repr(configs), **extra}
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    if as_pickle:
        with open(path, "wb") as f:
            pickle.dump(data, f)
    else:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)


def load(path: str, selected: dict[str, bool], layer_map: dict[str, nn.Module]) -> dict[str, Any]:
    """The file's data, ``best_params`` rebuilt from ``layer_map``; ``selected``: the configs'
    layers with their ``copy_weights``."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"SKAutoTuner.load_tuning_results: file_path: {path!r} not found")
    data, pickled = _read(path)
    where = f"SKAutoTuner.load_tuning_results: {path!r}"
    if not pickled and (not isinstance(data, dict) or data.get("format") != _FORMAT):
        raise ValueError(f"{where}: expected a file written by save_tuning_results (format {_FORMAT!r})")
    if not isinstance(data, dict) or not isinstance(data.get("results"), dict) or not isinstance(
            data.get("best_params"), dict):
        raise ValueError(f"{where}: expected tuning results (a dict with 'results' and 'best_params')")
    best = {}
    for name, entry in data["best_params"].items():
        if name not in selected:
            raise ValueError(f"{where}: layer {name!r} is not selected by this tuner's configs "
                             f"(they select {sorted(selected)})")
        if not isinstance(entry, dict) or "params" not in entry:
            raise ValueError(f"{where}: best_params[{name!r}]: expected a dict with 'params', got {entry!r}")
        copy_weights = bool(entry.get("copy_weights", selected[name]))
        module = None if entry["params"] is None else _rebuild(where, layer_map[name], name, entry, copy_weights)
        best[name] = {"params": entry["params"], "copy_weights": copy_weights, "best_layer": module}
    return {**data, "best_params": best}


def _rebuild(where: str, layer: nn.Module, name: str, entry: dict[str, Any], copy_weights: bool) -> nn.Module:
    """The layer ``entry["params"]`` gives ``name``, with the saved layer's tensors where they fit."""
    params = entry["params"]
    if not isinstance(params, dict) or not params:
        raise ValueError(f"{where}: layer {name!r}: params: expected a non-empty dict or None, got {params!r}")
    try:
        found = candidates(layer, name, {key: [value] for key, value in params.items()}, copy_weights)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{where}: layer {name!r}: params {params}: {error}") from None
    module = built(found[0], layer)
    saved = _saved_tensors(entry)
    if saved:
        try:
            module.load_state_dict(saved, strict=True)
        except (RuntimeError, KeyError, ValueError) as error:
            warnings.warn(f"{where}: layer {name!r}: the saved layer's tensors do not fit {type(module).__name__} "
                          f"({str(error).splitlines()[0]}); kept the layer rebuilt from params {params}",
                          UserWarning, stacklevel=4)
    return module
