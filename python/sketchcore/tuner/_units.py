"""Groups the resolved layers into search units: one per layer (``separate=True``) or one per
group sharing a setting (``separate=False``), each with its options smallest first."""
from __future__ import annotations

from typing import Any, Optional

import torch
from torch import nn

from sketchcore.tuner._candidates import candidates, stored
from sketchcore.tuner._configs import LayerConfig
from sketchcore.tuner._params import choices
from sketchcore.tuner._spectral import Option, Unit


def _key(params: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(params.items()))


def build_units(layers: dict[str, nn.Module], names: list[str], params: Any, separate: bool,
                copy_weights: bool, grams: Optional[dict[str, torch.Tensor]] = None) -> list[Unit]:
    grams = grams or {}
    per_layer = {name: candidates(layers[name], name, params, copy_weights, grams.get(name)) for name in names}
    for name, found in per_layer.items():
        if not found:  # only "auto" drops settings, and the tuner leaves such layers out of its configs
            raise ValueError(f"SKAutoTuner: layer {name!r}: no setting of params={params!r} stores fewer numbers "
                             f"than the dense layer ({stored(layers[name])}); expected smaller num_terms/low_rank/rank")
    if separate:
        return [Unit([name], stored(layers[name]), [Option(c.params, c.size, c.error, [c]) for c in found],
                     type(layers[name]).__name__)
                for name, found in per_layer.items()]
    shared = set.intersection(*(set(_key(c.params) for c in found) for found in per_layer.values()))
    if not shared:
        raise ValueError(f"SKAutoTuner: layers {names}: separate=False needs a setting valid for every layer of the "
                         f"group, and params={params!r} has none")
    options = []
    for key in shared:
        members = [next(c for c in per_layer[name] if _key(c.params) == key) for name in names]
        errors = [c.error for c in members]
        error = None if any(e is None for e in errors) else max(e for e in errors if e is not None)
        options.append(Option(dict(key), sum(c.size for c in members), error, members))
    options.sort(key=lambda o: (o.size, o.error if o.error is not None else 0.0))
    return [Unit(list(names), sum(stored(layers[name]) for name in names), options, type(layers[names[0]]).__name__)]


def units_of(configs: Any, layers: dict[str, nn.Module], grams: Optional[dict[str, torch.Tensor]] = None,
             first_only: bool = False) -> tuple[list[Unit], list[LayerConfig]]:
    """The search units of every config, and the config each comes from. ``first_only``: an
    explicit space reduced to the first value of each parameter (Panther's rule without tuning)."""
    units, owners = [], []
    for config in configs:
        params: Any = "auto" if config._auto else config.params
        if first_only and params != "auto":
            params = {key: [choices(spec, key)[0]] for key, spec in params.items()}  # type: ignore[index]
        for unit in build_units(layers, config.layer_names, params, config.separate, config.copy_weights, grams):
            units.append(unit)
            owners.append(config)
    return units, owners
