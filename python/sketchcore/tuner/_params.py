"""Parameter specifications (Panther's ``Categorical``, ``Int``, ``Float``) and their expansion into
the finite choices the searches walk through."""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence, Union

#: Int ranges up to this many values are expanded into choices.
MAX_EXPANDED = 4096


def _number(value: object, name: str, where: str, integer: bool) -> None:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        expected = "an int" if integer else "a real number"
        raise TypeError(f"{where}: {name}: expected {expected}, got {type(value).__name__} {value!r}")
    if not integer and not math.isfinite(value):  # type: ignore[arg-type]
        raise ValueError(f"{where}: {name}: expected a finite number, got {value!r}")


def _check_range(where: str, low: float, high: float, log: bool) -> None:
    if low > high:
        raise ValueError(f"{where}: high: expected ≥ low = {low}, got {high}")
    if log and low <= 0:
        raise ValueError(f"{where}: low: expected > 0 with log=True, got {low}")


@dataclass
class Categorical:
    """A parameter taking one of a fixed, non-empty set of ``choices`` (``Categorical([8, 16, 32])``).

    Parameters
    ----------
    choices : sequence
        The values, in order (a list or tuple; not a string), at least one.

    Raises
    ------
    TypeError, ValueError
        A string or non-sequence; an empty sequence.

    Examples
    --------
    >>> from sketchcore.tuner import Categorical
    >>> Categorical((8, 16, 32))
    Categorical([8, 16, 32])
    >>> Categorical([])
    Traceback (most recent call last):
        ...
    ValueError: Categorical: choices: expected at least one choice, got an empty sequence
    """

    choices: Sequence[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        if isinstance(self.choices, (str, bytes)) or not isinstance(self.choices, Sequence):
            raise TypeError(f"Categorical: choices: expected a sequence, got {type(self.choices).__name__}")
        if len(self.choices) == 0:
            raise ValueError("Categorical: choices: expected at least one choice, got an empty sequence")
        self.choices = list(self.choices)

    def __repr__(self) -> str:
        return f"Categorical({list(self.choices)})"


@dataclass
class Int:
    """An integer in [low, high] (inclusive) on a grid of ``step``; searches expand ranges of up
    to 4096 values into choices.

    Parameters
    ----------
    low, high : int
        Inclusive bounds, ``low`` ≤ ``high``.
    step : int, default 1
        Grid spacing ≥ 1 from ``low``.
    log : bool, default False
        Log-uniform draws in :class:`RandomSearch`/:class:`OptunaSearch` (needs low > 0).

    Raises
    ------
    TypeError, ValueError
        A non-int bound or step; ``high`` < ``low``, ``step`` < 1, or ``low`` ≤ 0 with ``log``.

    Examples
    --------
    >>> from sketchcore.tuner import Int
    >>> Int(4, 16, step=4)
    Int(low=4, high=16, step=4, log=False)
    >>> Int(8, 4)
    Traceback (most recent call last):
        ...
    ValueError: Int: high: expected ≥ low = 8, got 4
    """

    low: int
    high: int
    step: int = 1
    log: bool = False

    def __post_init__(self) -> None:
        for name in ("low", "high", "step"):
            _number(getattr(self, name), name, "Int", integer=True)
        _check_range("Int", self.low, self.high, self.log)
        if self.step < 1:
            raise ValueError(f"Int: step: expected an integer ≥ 1, got {self.step}")


@dataclass
class Float:
    """A real number in [low, high]; without ``step`` it is continuous (no grid for
    :class:`GridSearch` or :class:`SpectralSearch`).

    Parameters
    ----------
    low, high : float
        Finite bounds, ``low`` ≤ ``high``.
    step : float, optional
        Grid spacing > 0 from ``low``; None (default) for a continuous range.
    log : bool, default False
        Log-uniform draws (needs low > 0).

    Raises
    ------
    TypeError, ValueError
        A non-number bound or step; a non-finite bound, ``high`` < ``low``, ``step`` ≤ 0, or
        ``low`` ≤ 0 with ``log``.

    Examples
    --------
    >>> from sketchcore.tuner import Float
    >>> Float(0.1, 1.0, log=True)
    Float(low=0.1, high=1.0, step=None, log=True)
    >>> Float(0.0, 1.0, log=True)
    Traceback (most recent call last):
        ...
    ValueError: Float: low: expected > 0 with log=True, got 0.0
    """

    low: float
    high: float
    step: Optional[float] = None
    log: bool = False

    def __post_init__(self) -> None:
        _number(self.low, "low", "Float", integer=False)
        _number(self.high, "high", "Float", integer=False)
        _check_range("Float", self.low, self.high, self.log)
        if self.step is not None:
            _number(self.step, "step", "Float", integer=False)
            if self.step <= 0:
                raise ValueError(f"Float: step: expected > 0, got {self.step}")


ParamSpec = Union[Categorical, Int, Float, Sequence[Any]]


def choices(spec: object, name: str) -> Optional[list[Any]]:
    """The finite list of values of ``spec`` (a list, Categorical, Int, or a stepped Float), or
    None for a continuous Float. ``name`` is the parameter, for error messages."""
    if isinstance(spec, Categorical):
        return list(spec.choices)
    if isinstance(spec, Int):
        count = (spec.high - spec.low) // spec.step + 1
        if count > MAX_EXPANDED:
            raise ValueError(f"params: {name}: expected an Int range of at most {MAX_EXPANDED} values, got {count}")
        return list(range(spec.low, spec.high + 1, spec.step))
    if isinstance(spec, Float):
        if spec.step is None:
            return None
        count = int(math.floor((spec.high - spec.low) / spec.step + 1e-9)) + 1
        return [spec.low + i * spec.step for i in range(count)]
    if isinstance(spec, (list, tuple)):
        if len(spec) == 0:
            raise ValueError(f"params: {name}: expected at least one value, got an empty list")
        return list(spec)
    raise TypeError(f"params: {name}: expected a list, Categorical, Int or Float, got {type(spec).__name__}")


def grid(space: Mapping[str, Any], continuous: str) -> list[dict[str, Any]]:
    """Every combination of the space's values, in order; ValueError ``continuous`` (formatted with
    ``name``) for a continuous Float."""
    lists = {}
    for name, spec in space.items():
        values = choices(spec, name)
        if values is None:
            raise ValueError(continuous.format(name=name))
        lists[name] = values
    return [dict(zip(lists, combo)) for combo in itertools.product(*lists.values())]


def get_param_choices(spec: object) -> Optional[list[Any]]:
    """The values of ``spec`` (list, Categorical, Int or Float) in order, or None where there is
    no finite list: a continuous Float, a range of more than 4096 values (Panther stops at 100),
    or not a specification. Panther's function."""
    if not is_param_spec(spec):
        return None
    try:
        return choices(spec, "spec")
    except ValueError:  # a range too large to expand
        return None


def is_param_spec(value: object) -> bool:
    """Whether ``value`` is a parameter specification: a list, :class:`Categorical`,
    :class:`Int` or :class:`Float` (Panther's function)."""
    return isinstance(value, (Categorical, Int, Float, list))


def to_categorical(value: object) -> Categorical:
    """A list (or a :class:`Categorical`) as a :class:`Categorical` (Panther's function).

    Raises
    ------
    TypeError
        ``"to_categorical: value: expected a list or a Categorical, got ..."``."""
    if isinstance(value, Categorical):
        return value
    if isinstance(value, list):
        return Categorical(value)
    raise TypeError(f"to_categorical: value: expected a list or a Categorical, got {type(value).__name__}")
