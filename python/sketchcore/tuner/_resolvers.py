"""Panther's ``LayerNameResolver`` (selectors → layer names) and ``ParamsResolver`` (``params`` →
explicit search spaces)."""
from __future__ import annotations

import warnings
from typing import Any, Mapping, Optional

import torch
from torch import nn

from sketchcore.tuner._candidates import auto_space, candidates, stored
from sketchcore.tuner._configs import LayerConfig, TuningConfigs
from sketchcore.tuner._select import resolve


def _shape_key(layer: nn.Module) -> tuple[Any, ...]:
    """Layers "auto" groups together (Panther's rule): same type and weight shape (or width, heads)."""
    if isinstance(layer, nn.MultiheadAttention):
        return (type(layer), layer.embed_dim, layer.num_heads)
    weight = getattr(layer, "weight", None)
    return (type(layer), tuple(weight.shape) if isinstance(weight, torch.Tensor) else None)


def _layers(model: nn.Module, layer_map: Optional[Mapping[str, nn.Module]]) -> dict[str, nn.Module]:
    return dict(layer_map) if layer_map is not None else {name: m for name, m in model.named_modules() if name}


class LayerNameResolver:
    """Resolves Panther's layer selectors (see :class:`LayerConfig`) against a model's named modules.

    Parameters
    ----------
    model : torch.nn.Module
        The model whose layers are selected.
    layer_map : mapping of str to torch.nn.Module, optional
        Name → module; default every named submodule of ``model``.

    Examples
    --------
    >>> from torch import nn
    >>> from sketchcore.tuner import LayerNameResolver
    >>> model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    >>> LayerNameResolver(model).resolve({"type": "Linear", "indices": [1]})
    ['2']
    """

    def __init__(self, model: nn.Module, layer_map: Optional[Mapping[str, nn.Module]] = None) -> None:
        self.model = model
        self.layer_map = _layers(model, layer_map)

    def resolve(self, selectors: Any) -> list[str]:
        """The names of the layers ``selectors`` picks, each once: in model order, or for a dict
        sorted by name, then indexed (Panther's order). ValueError when nothing matches
        (``"LayerConfig: layer_names: no layer of the model matches ..."``) or for a malformed
        selector; TypeError for a selector value of the wrong type."""
        return resolve(self.layer_map, selectors)


class ParamsResolver:
    """Turns a config's ``params`` into explicit search spaces (Panther's ``ParamsResolver``):
    ``"auto"`` becomes one config per group of same-type, same-shape layers with the space it
    searches (a layer with no setting that saves numbers is left out with a warning); an explicit
    dict is checked against each layer and kept (a warning when no setting saves numbers).

    Parameters
    ----------
    model : torch.nn.Module
        The model.
    layer_map : mapping of str to torch.nn.Module, optional
        Name → module; default every named submodule of ``model``.
    verbose : bool, default False
        Print what "auto" resolved to.

    Examples
    --------
    >>> from torch import nn
    >>> from sketchcore.tuner import LayerConfig, ParamsResolver
    >>> model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.Linear(64, 8))
    >>> configs = ParamsResolver(model).resolve(LayerConfig(["0", "2", "3"], "auto"))
    >>> [(c.layer_names, c.params) for c in configs]
    [(['0', '2'], {'rank': [16]}), (['3'], {'rank': [1, 2, 3, 4, 5, 6, 7]})]
    """

    def __init__(self, model: nn.Module, layer_map: Optional[Mapping[str, nn.Module]] = None,
                 verbose: bool = False) -> None:
        self.model = model
        self.layer_map = _layers(model, layer_map)
        self.verbose = bool(verbose)

    def resolve(self, config: LayerConfig) -> TuningConfigs:
        """The config with explicit ``params`` and a list of names (several for ``"auto"``, or
        none). TypeError for a layer of an unsupported type; ValueError for a selector matching
        nothing or ``params`` a layer does not accept (``"SKAutoTuner: layer '...' ..."``)."""
        names = config.layer_names
        if not (isinstance(names, list) and all(isinstance(n, str) and n in self.layer_map for n in names)):
            names = resolve(self.layer_map, names)
        if config._auto:
            return TuningConfigs([LayerConfig._resolved(names, config.params, config.separate, config.copy_weights,
                                                        auto=True)])
        if config.params != "auto":
            for name in names:
                self._check_explicit(name, config.params)
            return TuningConfigs([LayerConfig._resolved(names, config.params, config.separate, config.copy_weights,
                                                        auto=False)])
        groups: dict[Any, list[str]] = {}
        spaces: dict[Any, dict[str, Any]] = {}
        for name in names:
            layer = self.layer_map[name]
            key = _shape_key(layer)
            if key not in spaces:
                space = auto_space(layer, name)
                if space is None:
                    warnings.warn(f"SKAutoTuner: layer {name!r}: params='auto' has no setting that stores fewer "
                                  f"numbers than the dense layer ({stored(layer)}); it stays dense", UserWarning,
                                  stacklevel=4)
                    continue
                spaces[key] = space
            groups.setdefault(key, []).append(name)
        resolved = [LayerConfig._resolved(group, spaces[key], config.separate, config.copy_weights, auto=True)
                    for key, group in groups.items()]
        if self.verbose:
            for c in resolved:
                print(f"[SKAutoTuner] params='auto' for {c.layer_names}: {c.params}")
        return TuningConfigs(resolved)

    def _check_explicit(self, name: str, params: Mapping[str, Any]) -> None:
        layer = self.layer_map[name]
        found = candidates(layer, name, params, copy_weights=False)  # validates keys and values
        dense = stored(layer)
        if isinstance(layer, (nn.Linear, nn.Conv2d)) and found and min(c.size for c in found) >= dense:
            warnings.warn(f"SKAutoTuner: layer {name!r}: every setting of params={dict(params)!r} stores at least as "
                          f"many numbers as the dense layer ({dense}); they are searched as given (as Panther does) "
                          "but cannot make the layer smaller", UserWarning, stacklevel=5)
