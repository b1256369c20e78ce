"""Spending one budget over many layers: each layer has a few options (dense, low rank at each
aligned rank, their int8 forms), each with a cost (parameters or bytes) and a predicted error
(its squared contribution to the model's output error); :func:`allocate` picks one option per
layer so that the summed error is smallest while the summed cost stays within the budget.

This is a multiple-choice knapsack. Solved here the way rate–distortion allocators solve it:
each layer's options are reduced to their lower convex hull (cost up, error down, the error
falling ever more slowly), every layer starts at its cheapest option, and the upgrade with the
largest error saved per unit of cost is taken while it fits (optimal for the problem's convex
relaxation, which the hull makes exact at every point where the budget is used up between
hull vertices); a last pass spends what is left on the best upgrade that still fits, hull or
not. Pure Python: no torch, so the rule is testable on constructed numbers."""
from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Option", "allocate", "convex_hull"]


@dataclass(frozen=True)
class Option:
    """One way to store a layer.

    ``kind``: "dense" (kept as it is), "lowrank" (float factors of ``rank``), "lowrank-int8"
    (int8 factors of ``rank``) or "int8" (the full-rank weight in int8). ``cost``: what it
    spends of the budget (parameters or bytes). ``error``: its predicted squared contribution to
    the model's output error (same units for every layer of one allocation)."""

    kind: str
    rank: int
    cost: int
    error: float


def convex_hull(options: Sequence[Option]) -> list[Option]:
    """The options worth taking in order of cost: the cheapest of each cost, then only those
    that lower the error, then only the lower convex hull of (cost, error) (each step saves
    less error per unit of cost than the one before).

    >>> hull = convex_hull([Option("a", 1, 1, 10.0), Option("b", 2, 2, 9.5), Option("c", 3, 3, 2.0),
    ...                     Option("d", 4, 4, 3.0)])
    >>> [o.kind for o in hull]
    ['a', 'c']
    """
    ordered = sorted(options, key=lambda o: (o.cost, o.error))
    pareto: list[Option] = []
    for option in ordered:
        if not pareto or option.error < pareto[-1].error:
            if pareto and option.cost == pareto[-1].cost:
                continue
            pareto.append(option)
    hull: list[Option] = []
    for option in pareto:
        while len(hull) >= 2 and _slope(hull[-2], hull[-1]) <= _slope(hull[-2], option):
            hull.pop()  # hull[-1] saves less per unit cost than going straight to option
        hull.append(option)
    return hull


def _slope(a: Option, b: Option) -> float:
    """Error saved per unit of cost going from ``a`` to the costlier ``b``."""
    return (a.error - b.error) / (b.cost - a.cost)


def allocate(options: Mapping[str, Sequence[Option]], budget: float, negligible: float = 0.0) -> dict[str, Option]:
    """One option per layer with the smallest summed error whose summed cost is at most
    ``budget`` (greedy on the convex hulls, then a fill pass; see the module's notes). A change
    that saves no more than ``negligible`` error is not made: the budget is an upper bound, and
    spending it on nothing would only cost time.

    Raises
    ------
    ValueError
        A layer without options, or a budget below the sum of the cheapest options (the message
        gives both).

    Examples
    --------
    >>> choice = allocate({"a": [Option("lowrank", 1, 10, 5.0), Option("dense", 0, 40, 0.0)],
    ...                    "b": [Option("lowrank", 1, 10, 1.0), Option("dense", 0, 40, 0.0)]}, budget=50)
    >>> choice["a"].kind, choice["b"].kind  # the budget goes to the layer whose error it saves most
    ('dense', 'lowrank')
    """
    hulls: dict[str, list[Option]] = {}
    for name, opts in options.items():
        if not opts:
            raise ValueError(f"allocate: options[{name!r}]: expected at least one option, got none")
        hulls[name] = convex_hull(opts)
    position = {name: 0 for name in hulls}
    spent = sum(hull[0].cost for hull in hulls.values())
    if spent > budget:
        raise ValueError(f"allocate: budget: expected at least {spent} (every layer at its cheapest option), "
                         f"got {budget}")
    queue = [(-_slope(hull[0], hull[1]), name) for name, hull in hulls.items() if len(hull) > 1]
    heapq.heapify(queue)
    while queue:
        _, name = heapq.heappop(queue)
        hull, at = hulls[name], position[name]
        step = hull[at + 1].cost - hull[at].cost
        if hull[at].error - hull[at + 1].error <= negligible:
            continue  # the rest of this hull saves less still (it is convex)
        if spent + step > budget:
            continue  # this layer's next hull step does not fit; the fill pass may find a smaller one
        spent += step
        position[name] = at + 1
        if at + 2 < len(hull):
            heapq.heappush(queue, (-_slope(hull[at + 1], hull[at + 2]), name))
    chosen = {name: hulls[name][position[name]] for name in hulls}
    return _fill(options, chosen, budget - spent, negligible)


def _fill(options: Mapping[str, Sequence[Option]], chosen: dict[str, Option], left: float,
          negligible: float) -> dict[str, Option]:
    """Spends what the hull steps left on the single change (any option, hull or not) that
    lowers the summed error most and still fits, until none does."""
    while True:
        best: tuple[float, str, Option] | None = None
        for name, opts in options.items():
            current = chosen[name]
            for option in opts:
                extra = option.cost - current.cost
                saved = current.error - option.error
                if extra <= left and saved > negligible and (best is None or saved > best[0]):
                    best = (saved, name, option)
        if best is None:
            return chosen
        _, name, option = best
        left -= option.cost - chosen[name].cost
        chosen[name] = option
