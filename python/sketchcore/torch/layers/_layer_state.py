"""What every sketched layer saves, loads and refuses: the base class ``SketchedLayer``.

* **state_dict keys are the tensors only**, under Panther's names, so a Panther checkpoint loads
  into a sketchcore layer with ``strict=True`` and a sketchcore state_dict loads into Panther's
  layer. The configuration (shape, activation, dropout, …) goes into the state_dict's per-module
  metadata (``state_dict._metadata[prefix]["sketchcore"]``), which ``torch.save``/``torch.load``
  keep (also with ``weights_only=True``) and ``restore_model`` reads.
* **Loading never changes the configuration silently**: a saved configuration that differs from
  the layer's is an error naming both; a state_dict without one (Panther's, or a plain
  ``dict(...)`` copy) keeps the layer's own. Checkpoints of sketchcore 0.1, which stored the
  configuration under an ``_extra_state`` key, still load.
* **``.weight`` is derived and read-only**: a :class:`DerivedWeight` (see ``_derived_weight``);
  assigning ``layer.weight = ...`` raises instead of torch's ``KeyError``.
"""
from __future__ import annotations

import weakref
from typing import Any, Optional

import torch
from torch import Tensor, nn

from sketchcore.torch.layers._derived_weight import DerivedWeight

#: The metadata entry holding a layer's configuration.
CONFIG_KEY = "sketchcore"
#: The legacy key (sketchcore 0.1) under which the configuration was a state_dict entry.
LEGACY_KEY = "_extra_state"

# layer → its live DerivedWeight: weak both ways, so neither a dense value nor the wrapper
# outlives the caller's use of it (a compressed model keeps no dense copies around).
_LIVE_WEIGHTS: "weakref.WeakKeyDictionary[nn.Module, weakref.ref[DerivedWeight]]" = weakref.WeakKeyDictionary()


def _comparable(value: Any) -> Any:
    """Tuples come back as lists from some serialisers."""
    return tuple(value) if isinstance(value, list) else value


class SketchedLayer(nn.Module):
    """Base of sketchcore's torch layers: configuration in the state_dict's metadata, checked on
    load; a derived, read-only ``weight`` for layers that define :meth:`_dense_weight`.

    Raises
    ------
    RuntimeError
        ``load_state_dict`` of a state_dict saved by a layer of another configuration.
    AttributeError
        Assigning ``layer.weight``.

    Examples
    --------
    >>> from sketchcore.torch import LowRankLinear
    >>> saved = LowRankLinear(64, 32, rank=4).state_dict()
    >>> LowRankLinear(64, 32, rank=8).load_state_dict(saved)
    Traceback (most recent call last):
    RuntimeError: Error(s) in loading state_dict for LowRankLinear: ... got rank=4 (this layer: 8); ...
    """

    #: Configuration entries that are labels of how the layer was made, not what it computes.
    _CONFIG_LABELS: tuple[str, ...] = ("init",)

    def layer_config(self) -> dict[str, Any]:
        """The configuration that rebuilds this layer (``{"sketchcore": class name, ...}``)."""
        raise NotImplementedError

    # -- state_dict ---------------------------------------------------------------------------
    def _save_to_state_dict(self, destination: Any, prefix: str, keep_vars: bool) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        metadata = getattr(destination, "_metadata", None)
        if metadata is not None:
            metadata.setdefault(prefix[:-1], {})[CONFIG_KEY] = self.layer_config()

    def _load_from_state_dict(self, state_dict: Any, prefix: str, local_metadata: dict[str, Any], strict: bool,
                              missing_keys: list[str], unexpected_keys: list[str], error_msgs: list[str]) -> None:
        legacy = state_dict.pop(prefix + LEGACY_KEY, None)
        saved = local_metadata.get(CONFIG_KEY, legacy)
        if saved is not None:
            problem = self._config_mismatch(saved)
            if problem:
                error_msgs.append(problem)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    def _config_mismatch(self, saved: Any) -> Optional[str]:
        """A message naming each entry where ``saved`` differs from this layer's configuration."""
        mine = self.layer_config()
        kind = mine[CONFIG_KEY]
        if not isinstance(saved, dict):
            return f"{kind}: state_dict: expected a saved configuration dict, got {saved!r}"
        differences = [f"{key}={_comparable(saved.get(key))!r} (this layer: {value!r})"
                       for key, value in mine.items()
                       if key not in self._CONFIG_LABELS and key in saved and _comparable(saved[key]) != value]
        if not differences:
            return None
        return (f"{kind}: state_dict: expected a saved layer with this layer's configuration, got "
                f"{', '.join(differences)}; build the layer with the saved configuration (restore_model does), "
                f"or load the tensors without it (a plain dict(state_dict) carries none)")

    # -- the derived dense weight -------------------------------------------------------------
    def _dense_weight(self) -> Tensor:
        """The dense weight (in nn.Linear's or nn.Conv2d's layout) computed from the factors."""
        raise NotImplementedError

    def _weight_sources(self) -> tuple[Tensor, ...]:
        """The tensors ``_dense_weight`` reads (their versions decide when it is stale)."""
        raise NotImplementedError

    def _weight_shape(self) -> tuple[int, ...]:
        raise NotImplementedError

    def _derived_weight(self) -> Tensor:
        """The layer's :class:`DerivedWeight`: the same object while the caller holds it and the
        factors are the same tensors."""
        sources = self._weight_sources()
        ref = _LIVE_WEIGHTS.get(self)
        live = ref() if ref is not None else None
        if (live is None or len(live._sources) != len(sources) or any(a is not b for a, b in zip(live._sources, sources))
                or live._differentiable != any(s.requires_grad for s in sources)):
            live = DerivedWeight(type(self).__name__, self._weight_shape(), self._dense_weight, sources)
            _LIVE_WEIGHTS[self] = weakref.ref(live)
        return live

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "weight":
            raise AttributeError(
                f"{type(self).__name__}.weight: expected no assignment (it is the dense equivalent computed from "
                f"the factors, read-only), got a {type(value).__name__}; to tie weights, keep the layer dense "
                f"(sketch_model keeps tied layers), or make an editable dense copy (to_linear(), to_conv2d())")
        super().__setattr__(name, value)


def saved_layer_configs(state_dict: Any) -> dict[str, dict[str, Any]]:
    """Module name → saved configuration of every sketchcore layer a state_dict records: from
    its metadata, or from sketchcore 0.1's ``_extra_state`` keys."""
    configs: dict[str, dict[str, Any]] = {}
    for name, entry in (getattr(state_dict, "_metadata", None) or {}).items():
        if isinstance(entry, dict) and isinstance(entry.get(CONFIG_KEY), dict):
            configs[name] = dict(entry[CONFIG_KEY])
    suffix = "." + LEGACY_KEY
    for key, value in state_dict.items():
        if key.endswith(suffix) and isinstance(value, dict) and "sketchcore" in value:
            configs.setdefault(key[: -len(suffix)], dict(value))
    return configs


def inferred_linear_configs(model: nn.Module, state_dict: Any) -> dict[str, dict[str, Any]]:
    """Configurations of sketched linear layers that a state_dict without metadata holds in
    place of a dense ``nn.Linear`` of ``model`` (Panther's checkpoints, plain dict copies): an
    SKLinear where S1s/S2s/U1s/U2s are, a LowRankLinear where S/U are; no activation or dropout
    (a state_dict without metadata records none)."""
    configs: dict[str, dict[str, Any]] = {}
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear) or f"{name}.weight" in state_dict:
            continue
        bias = f"{name}.bias" in state_dict
        S1s, U = state_dict.get(f"{name}.S1s"), state_dict.get(f"{name}.U")
        if S1s is not None and f"{name}.S2s" in state_dict and getattr(S1s, "dim", lambda: 0)() == 3:
            T, n_in, k = S1s.shape
            configs[name] = {"sketchcore": "SKLinear", "in_features": n_in, "num_terms": T, "low_rank": k,
                             "out_features": state_dict[f"{name}.S2s"].shape[2], "bias": bias,
                             "activation": "none", "dropout": 0.0}
        elif U is not None and f"{name}.S" in state_dict and getattr(U, "dim", lambda: 0)() == 2:
            n_in, rank = state_dict[f"{name}.S"].shape
            configs[name] = {"sketchcore": "LowRankLinear", "in_features": n_in, "out_features": U.shape[1],
                             "rank": rank, "bias": bias, "activation": "none", "dropout": 0.0}
    return configs


def dense_copy(layer: Any, reference: Tensor) -> nn.Linear:
    """An ``nn.Linear`` with ``layer.weight`` and ``layer.bias``, of ``reference``'s dtype and device."""
    linear = nn.Linear(layer.in_features, layer.out_features, bias=layer.bias is not None, dtype=reference.dtype,
                       device=reference.device)
    with torch.no_grad():
        linear.weight.copy_(layer.weight)
        if layer.bias is not None:
            linear.bias.copy_(layer.bias)
    return linear
