"""``LayerConfig`` (which layers, which parameters) and ``TuningConfigs`` (a list of them),
with Panther's names and call shapes."""
from __future__ import annotations

import copy
from typing import Any, Callable, Iterator, Mapping, Sequence, Union

from sketchcore.tuner._params import choices

#: Panther's selectors: a name or regex, a list of them, or a dict of criteria.
LayerSelector = Union[str, Sequence[str], Mapping[str, Any]]
ParamsArg = Union[str, Mapping[str, Any]]


class LayerConfig:
    """The layers to tune and their search space.

    ``layer_names``: a layer name or regular expression, a list of them, or a dict with any of
    ``"pattern"`` (regex or list), ``"type"`` (class name such as ``"Linear"``, or a list),
    ``"contains"`` (substring or list), then ``"indices"`` (int or list) or ``"range"``
    (``[start, end]`` or ``[start, end, step]``) over the sorted matches.
    ``params``: ``"auto"`` (the layers' whole useful range: a LowRankLinear of every rank that
    saves parameters for ``nn.Linear``, SKConv2d ranks for ``nn.Conv2d``, feature counts for
    ``nn.MultiheadAttention``) or a dict of parameter → list / ``Categorical`` / ``Int`` /
    ``Float`` (``num_terms``/``low_rank`` give Panther's SKLinear/SKConv2d, ``rank`` a
    LowRankLinear, ``num_random_features``/``kernel_fn`` a RandMultiHeadAttention).
    ``separate``: tune each layer on its own (True) or give the group one shared setting.
    ``copy_weights``: start every candidate from the trained layer (SVD conversion; True) or
    from a fresh random layer (False, as Panther without copying).
    """

    def __init__(self, layer_names: LayerSelector, params: ParamsArg = "auto", separate: bool = True,
                 copy_weights: bool = True) -> None:
        if not isinstance(layer_names, (str, Sequence, Mapping)) or isinstance(layer_names, bytes):
            raise TypeError(f"LayerConfig: layer_names: expected a string, a list of strings or a dict of selectors, "
                            f"got {type(layer_names).__name__}")
        if isinstance(params, str):
            if params != "auto":
                raise ValueError(f"LayerConfig: params: expected 'auto' or a dict, got {params!r}")
        elif isinstance(params, Mapping):
            if not params:
                raise ValueError("LayerConfig: params: expected at least one parameter, got an empty dict")
            for name, spec in params.items():
                choices(spec, str(name))  # validates the spec
        else:
            raise TypeError(f"LayerConfig: params: expected 'auto' or a dict, got {type(params).__name__}")
        for name, flag in (("separate", separate), ("copy_weights", copy_weights)):
            if not isinstance(flag, bool):
                raise TypeError(f"LayerConfig: {name}: expected a bool, got {type(flag).__name__}")
        self.layer_names: Any = layer_names if isinstance(layer_names, (str, Mapping)) else list(layer_names)
        self.params: Any = params if isinstance(params, str) else dict(params)
        self.separate = separate
        self.copy_weights = copy_weights

    def __repr__(self) -> str:
        return (f"LayerConfig(layer_names={self.layer_names!r}, params={self.params!r}, separate={self.separate}, "
                f"copy_weights={self.copy_weights})")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LayerConfig) and (self.layer_names, self.params, self.separate, self.copy_weights) == (
            other.layer_names, other.params, other.separate, other.copy_weights)

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def clone(self) -> LayerConfig:
        """A deep copy."""
        return copy.deepcopy(self)


class TuningConfigs:
    """An ordered collection of :class:`LayerConfig`; the editing methods return new collections."""

    def __init__(self, configs: Sequence[LayerConfig]) -> None:
        configs = list(configs)
        for i, config in enumerate(configs):
            if not isinstance(config, LayerConfig):
                raise TypeError(f"TuningConfigs: configs[{i}]: expected a LayerConfig, got {type(config).__name__}")
        self.configs = configs

    def __repr__(self) -> str:
        return f"TuningConfigs(configs={self.configs!r})"

    def __len__(self) -> int:
        return len(self.configs)

    def __getitem__(self, index: int) -> LayerConfig:
        return self.configs[index]

    def __iter__(self) -> Iterator[LayerConfig]:
        return iter(self.configs)

    def _index(self, index: int) -> int:
        if not 0 <= index < len(self.configs):
            raise IndexError(f"TuningConfigs: index: expected 0 ≤ index < {len(self.configs)}, got {index}")
        return index

    def add(self, config: LayerConfig) -> TuningConfigs:
        return TuningConfigs([*self.configs, config])

    def remove(self, index: int) -> TuningConfigs:
        index = self._index(index)
        return TuningConfigs(self.configs[:index] + self.configs[index + 1:])

    def replace(self, index: int, config: LayerConfig) -> TuningConfigs:
        index = self._index(index)
        return TuningConfigs(self.configs[:index] + [config] + self.configs[index + 1:])

    def clone(self) -> TuningConfigs:
        return TuningConfigs([config.clone() for config in self.configs])

    def merge(self, other: TuningConfigs) -> TuningConfigs:
        return TuningConfigs(self.configs + other.configs)

    def filter(self, predicate: Callable[[LayerConfig], bool]) -> TuningConfigs:
        return TuningConfigs([config for config in self.configs if predicate(config)])

    def map(self, transform: Callable[[LayerConfig], LayerConfig]) -> TuningConfigs:
        return TuningConfigs([transform(config) for config in self.configs])
