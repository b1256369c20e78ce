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

    Parameters
    ----------
    layer_names : str, list of str or dict
        A layer name or regular expression, a list of them, or a dict with any of ``"pattern"``
        (regex or list), ``"type"`` (class name such as ``"Linear"``, or a list), ``"contains"``
        (substring or list), then ``"indices"`` (int or list) or ``"range"`` (``[start, end]``
        or ``[start, end, step]``) over the sorted matches; resolved by :class:`SKAutoTuner`.
    params : "auto" or dict, default "auto"
        ``"auto"`` (every LowRankLinear rank that saves numbers for ``nn.Linear``, SKConv2d
        ranks for ``nn.Conv2d``, feature counts for ``nn.MultiheadAttention``) or parameter →
        list, :class:`Categorical`, :class:`Int` or :class:`Float` (``num_terms``/``low_rank``:
        Panther's SKLinear/SKConv2d; ``rank``: LowRankLinear; ``num_random_features``/
        ``kernel_fn``: RandMultiHeadAttention).
    separate : bool, default True
        Tune each selected layer on its own (True) or the group with one shared setting (False).
    copy_weights : bool, default True
        Start candidates from the trained layer (conversion; True) or random (False, as Panther
        without copying).

    Raises
    ------
    TypeError
        ``"LayerConfig: <argument>: expected ..., got ..."`` for a wrong type, or ``"params:
        <name>: expected a list, Categorical, Int or Float, got ..."``.
    ValueError
        A string ``params`` other than ``"auto"``, an empty dict, an empty list or an Int range
        of more than 4096 values.

    Examples
    --------
    >>> from sketchcore.tuner import Int, LayerConfig
    >>> LayerConfig({"type": "Linear"})
    LayerConfig(layer_names={'type': 'Linear'}, params='auto', separate=True, copy_weights=True)
    >>> LayerConfig(["fc1", "fc2"], {"rank": Int(4, 16, step=4)}, separate=False)
    LayerConfig(layer_names=['fc1', 'fc2'], params={'rank': Int(low=4, high=16, step=4, log=False)},
                separate=False, copy_weights=True)
    >>> LayerConfig("fc1", {})
    Traceback (most recent call last):
        ...
    ValueError: LayerConfig: params: expected at least one parameter, got an empty dict
    """

    #: True for a config resolved from "auto": ``params`` shows the space, still searched as "auto".
    _auto = False

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

    @classmethod
    def _resolved(cls, names: list[str], params: ParamsArg, separate: bool, copy_weights: bool,
                  auto: bool) -> LayerConfig:
        """A config over resolved names; with ``auto``, ``params`` is the explicit space "auto"
        stands for (not re-validated: it may exceed an Int's expansion limit, and is never expanded)."""
        config = cls(names, "auto" if auto else params, separate, copy_weights)
        if auto:
            config.params, config._auto = dict(params), True  # type: ignore[arg-type]
        return config

    def __repr__(self) -> str:
        return (f"LayerConfig(layer_names={self.layer_names!r}, params={self.params!r}, separate={self.separate}, "
                f"copy_weights={self.copy_weights})")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LayerConfig) and (self.layer_names, self.params, self.separate, self.copy_weights) == (
            other.layer_names, other.params, other.separate, other.copy_weights)

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def clone(self) -> LayerConfig:
        """A deep copy, sharing no mutable state with this config."""
        return copy.deepcopy(self)


class TuningConfigs:
    """An ordered collection of :class:`LayerConfig` (``len``, indexing, iteration); the editing
    methods return new collections and leave it unchanged.

    Parameters
    ----------
    configs : sequence of LayerConfig
        The configs, in order.

    Raises
    ------
    TypeError
        ``"TuningConfigs: configs[i]: expected a LayerConfig, got ..."``.

    Examples
    --------
    >>> from sketchcore.tuner import LayerConfig, TuningConfigs
    >>> configs = TuningConfigs([LayerConfig("fc1"), LayerConfig("fc2", {"rank": [4]})])
    >>> len(configs), configs[1].layer_names, [c.layer_names for c in configs]
    (2, 'fc2', ['fc1', 'fc2'])
    """

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
        """A new collection with ``config`` appended (TypeError for a non-LayerConfig)."""
        return TuningConfigs([*self.configs, config])

    def remove(self, index: int) -> TuningConfigs:
        """A new collection without the config at ``index`` (IndexError outside the range)."""
        index = self._index(index)
        return TuningConfigs(self.configs[:index] + self.configs[index + 1:])

    def replace(self, index: int, config: LayerConfig) -> TuningConfigs:
        """A new collection with the config at ``index`` replaced (IndexError, TypeError as above)."""
        index = self._index(index)
        return TuningConfigs(self.configs[:index] + [config] + self.configs[index + 1:])

    def clone(self) -> TuningConfigs:
        """A deep copy (every config cloned)."""
        return TuningConfigs([config.clone() for config in self.configs])

    def merge(self, other: TuningConfigs) -> TuningConfigs:
        """A new collection of this one's configs followed by ``other``'s."""
        return TuningConfigs(self.configs + other.configs)

    def filter(self, predicate: Callable[[LayerConfig], bool]) -> TuningConfigs:
        """A new collection of the configs for which ``predicate(config)`` is true."""
        return TuningConfigs([config for config in self.configs if predicate(config)])

    def map(self, transform: Callable[[LayerConfig], LayerConfig]) -> TuningConfigs:
        """A new collection of ``transform(config)`` for every config (TypeError for a non-LayerConfig)."""
        return TuningConfigs([transform(config) for config in self.configs])
