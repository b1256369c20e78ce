"""Resolves Panther's layer selectors against a model's named modules."""
from __future__ import annotations

import re
from typing import Any, Mapping

from torch import nn

_KEYS = ("pattern", "type", "contains", "indices", "range")


def _strings(value: Any, key: str) -> list[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(item, str) for item in items):
        raise TypeError(f"LayerConfig: layer_names[{key!r}]: expected a string or a list of strings, got {value!r}")
    return list(items)


def _match(names: list[str], pattern: str, exact: bool = True) -> list[str]:
    """An exact layer name selects that layer (unless ``exact`` is False: a dict's "pattern");
    anything else is a regular expression searched in each name (Panther's rule)."""
    if exact and pattern in names:
        return [pattern]
    try:
        regex = re.compile(pattern)
    except re.error as error:
        raise ValueError(f"LayerConfig: layer_names: {pattern!r} is neither a layer name nor a valid regular "
                         f"expression ({error})") from None
    return [name for name in names if regex.search(name)]


def _indices(selectors: Mapping[str, Any], matched: list[str]) -> list[str]:
    if "indices" in selectors and "range" in selectors:
        raise ValueError("LayerConfig: layer_names: expected at most one of 'indices' and 'range', got both")
    if "indices" in selectors:
        value = selectors["indices"]
        indices = [value] if isinstance(value, int) and not isinstance(value, bool) else value
        if not isinstance(indices, (list, tuple)) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                           for i in indices):
            raise TypeError(f"LayerConfig: layer_names['indices']: expected an int or a list of ints, got {value!r}")
        for i in indices:
            if not 0 <= i < len(matched):
                raise ValueError(f"LayerConfig: layer_names['indices']: expected indices in [0, {len(matched)}) "
                                 f"(the {len(matched)} matched layers), got {i}")
        return [matched[i] for i in indices]
    if "range" in selectors:
        value = selectors["range"]
        if (not isinstance(value, (list, tuple)) or len(value) not in (2, 3)
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
            raise TypeError(f"LayerConfig: layer_names['range']: expected [start, end] or [start, end, step] of "
                            f"ints, got {value!r}")
        start, end, step = (*value, 1) if len(value) == 2 else value
        if not 0 <= start < end <= len(matched) or step < 1:
            raise ValueError(f"LayerConfig: layer_names['range']: expected 0 ≤ start < end ≤ {len(matched)} (the "
                             f"matched layers) and step ≥ 1, got {list(value)}")
        return matched[start:end:step]
    return matched


def resolve(layers: Mapping[str, nn.Module], selector: Any) -> list[str]:
    """The names (in model order) of the layers ``selector`` picks. Raises ValueError when
    nothing matches, naming the selector."""
    names = list(layers)
    if isinstance(selector, str):
        found = _match(names, selector)
    elif isinstance(selector, Mapping):
        unknown = sorted(set(selector) - set(_KEYS))
        if unknown:
            raise ValueError(f"LayerConfig: layer_names: expected selector keys among {list(_KEYS)}, got {unknown}")
        found = names
        if "pattern" in selector:
            hits = {hit for p in _strings(selector["pattern"], "pattern") for hit in _match(names, p, exact=False)}
            found = [name for name in found if name in hits]
        if "contains" in selector:
            parts = _strings(selector["contains"], "contains")
            found = [name for name in found if any(part in name for part in parts)]
        if "type" in selector:
            types = _strings(selector["type"], "type")
            found = [name for name in found if type(layers[name]).__name__ in types]
        found = _indices(selector, sorted(found))
    else:
        hits = {hit for pattern in _strings(selector, "list") for hit in _match(names, pattern)}
        found = [name for name in names if name in hits]
    if not found:
        raise ValueError(f"LayerConfig: layer_names: no layer of the model matches {selector!r} "
                         f"(layers: {names[:12]}{' ...' if len(names) > 12 else ''})")
    order = {name: i for i, name in enumerate(names)}
    return sorted(dict.fromkeys(found), key=order.__getitem__) if not isinstance(selector, Mapping) else found
