"""Checks on the user's scores (one finite real number each) and threshold (its scale included)."""
from __future__ import annotations

import math
import numbers
import warnings
from typing import Any, Optional, Union

#: The accuracy_threshold that makes the dense model's own score the threshold.
DENSE = "dense"
Threshold = Union[None, float, str]


def _describe(value: Any) -> str:
    """What a function returned, in words: the type, and the shape of an array."""
    shape = getattr(value, "shape", None)
    if shape is not None and not isinstance(value, numbers.Number):
        return f"a {type(value).__name__} of shape {tuple(shape)}"
    text = repr(value)
    return f"{type(value).__name__} {text[:80]}{'...' if len(text) > 80 else ''}"


def checked_score(value: Any, function: str) -> float:
    """``value`` as a float when it is one finite real number (a Python or NumPy scalar, or a
    0-d tensor/array); else a ValueError naming ``function`` and what it returned."""
    expected = "a finite real number (a 0-d tensor is fine)"
    number: Any = value
    if getattr(value, "shape", None) == () and hasattr(value, "item"):  # 0-d torch tensor / NumPy array
        number = value.item()
    if isinstance(number, bool) or not isinstance(number, numbers.Real):
        raise ValueError(f"SKAutoTuner: {function}: expected {expected}, got {_describe(value)}")
    result = float(number)
    if not math.isfinite(result):
        raise ValueError(f"SKAutoTuner: {function}: expected {expected}, got {result}")
    return result


def check_threshold(threshold: object) -> Threshold:
    """``accuracy_threshold`` as given when valid: None, ``"dense"`` or a finite number."""
    if threshold is None or (isinstance(threshold, str) and threshold == DENSE):
        return threshold  # type: ignore[return-value]
    if isinstance(threshold, str):
        raise ValueError(f"SKAutoTuner: accuracy_threshold: expected None, 'dense' or a finite number, got "
                         f"{threshold!r}")
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real) or not math.isfinite(threshold):
        raise TypeError(f"SKAutoTuner: accuracy_threshold: expected None, 'dense' or a finite number, got "
                        f"{threshold!r}")
    return float(threshold)


def warn_on_scale_mismatch(threshold: Optional[float], score: float, stacklevel: int = 4) -> None:
    """Warns when one of ``threshold`` and ``score`` looks like a fraction (in [0, 1]) and the
    other like a percentage (in (1, 100]), at least 5× apart: a threshold of 0.9 against scores
    of 97.2 is met by every model, one of 90 against scores of 0.97 by none."""
    if threshold is None:
        return
    low, high = sorted((threshold, score))
    if 0.0 <= low <= 1.0 < high <= 100.0 and high >= 5.0 * low:
        warnings.warn(f"SKAutoTuner: accuracy_threshold = {threshold:.6g} and accuracy_eval_func returned "
                      f"{score:.6g}: one looks like a fraction and the other like a percentage; expected both on "
                      "the same scale", UserWarning, stacklevel=stacklevel)
