"""DTensor sharding rules of sketchcore's operators (``torch.distributed.tensor.experimental.register_sharding``).

A DTensor that reaches ``sketchcore::sketched_linear``, ``sketchcore::sklinear`` or their
backwards runs on its local shards when the placements of x and the factors form one of the
layouts below, on every mesh dimension; any other layout raises an error naming the
placements (the rule's ValueError, which DTensor's dispatch re-raises as a RuntimeError with the
same message). The rule offers DTensor exactly one strategy, the one the inputs already have, so
nothing is ever redistributed to fit it (no silent all-gather); only a bias of a layout whose
output is a partial sum is split locally (Replicate → Partial, no communication), and only a
gradient arriving Partial where the backward needs it replicated is all-reduced.

==========  ===========================  =============  =======================================
layout      x                            S side         U side (and bias)
==========  ===========================  =============  =======================================
replicated  Replicate                    Replicate      Replicate → y Replicate
batch       Shard(i), i a leading dim    Replicate      Replicate → y Shard(i)
columns     Replicate                    Replicate      Shard(d_out), bias Shard(0) → y Shard(-1)
rank        Replicate                    Shard(rank)    Shard(rank) → y Partial (sketched_linear only)
rows        Shard(-1)                    Shard(d_in)    Replicate → y Partial
==========  ===========================  =============  =======================================

A Partial output is a sum over ranks; an activation or dropout would act on its parts, so those
layouts need ``activation="none"``; the inner activation σ acts on the intermediate, elementwise,
so it runs in every layout but "rows" (whose intermediate is a partial sum); and dropout runs only replicated (sharded masks would repeat).
Each layout's backward is the matching local computation: parameter gradients come out Partial
where the parameter was replicated and used on shards (torch reduces them when they are read).
"""
from __future__ import annotations

from typing import Any, Optional

from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor._dtensor_spec import DTensorSpec
from torch.distributed.tensor.experimental import register_sharding

import torch

R, P = Replicate(), Partial()

#: Per operator: positions of (x, S-side factors, U-side factors, bias) and of the activation,
#: dropout probability and inner activation (None: the operator has none) among the forward's
#: arguments; the backward's arguments are (grad, *forward tensors, z, bias, ...) - see _backward_rule.
_SKETCHED = {"x": 0, "S": (1,), "U": (2,), "bias": 3, "activation": 4, "dropout_p": 6, "inner": 8,
             "backward": {"activation": 6, "dropout_p": 8, "needs": 10, "inner": 11}}
_SKLINEAR = {"x": 0, "S": (1, 4), "U": (3, 2), "bias": 5, "activation": 6, "dropout_p": 7, "inner": None,
             "backward": {"activation": 8, "dropout_p": 9, "needs": 11, "inner": None}}  # (S1s, U2s), (U1s, S2s)


def _arg(args: tuple, at: Optional[int], default: Any) -> Any:
    """Argument ``at`` (trailing defaulted arguments may be absent)."""
    return args[at] if at is not None and at < len(args) else default


def _name(p: Any) -> str:
    return type(p).__name__ + (f"({p.dim})" if isinstance(p, Shard) else "()")


def _layout(op: str, x: DTensorSpec, S: list[DTensorSpec], U: list[DTensorSpec], dim: int, activation: str,
            dropout_p: float, inner: str = "none") -> tuple[str, int]:
    """The layout of mesh dimension ``dim`` ("replicated", "batch", "columns", "rank", "rows")
    and, for "batch", the sharded dimension of x; else a ValueError naming the placements."""
    px, pS, pU = x.placements[dim], [s.placements[dim] for s in S], [u.placements[dim] for u in U]
    x_nd, s_nd = x.ndim, S[0].ndim

    def all_are(placements: list[Any], want: Any) -> bool:
        return all(p == want for p in placements)

    layout, batch_dim = None, -1
    if isinstance(px, Shard) and px.dim % x_nd < x_nd - 1 and all_are(pS, R) and all_are(pU, R):
        layout, batch_dim = "batch", px.dim % x_nd
    elif px == R and all_are(pS, R) and all_are(pU, R):
        layout = "replicated"
    elif px == R and all_are(pS, R) and all_are(pU, Shard(s_nd - 1)):
        layout = "columns"
    elif op == "sketched_linear" and px == R and all_are(pS, Shard(0 if s_nd == 3 else 1)) and all_are(pU, Shard(0)):
        layout = "rank"
    elif isinstance(px, Shard) and px.dim % x_nd == x_nd - 1 and all_are(pS, Shard(s_nd - 2)) and all_are(pU, R):
        layout = "rows"
    where = (f"sketchcore::{op}: mesh dimension {dim}: x {_name(px)}, S side "
             f"{', '.join(map(_name, pS))}, U side {', '.join(map(_name, pU))}")
    if layout is None:
        raise ValueError(f"{where}: expected a layout sketchcore computes on local shards (replicated; x sharded "
                         f"on a leading dimension; U by d_out; S and U by the rank; x and S by d_in), got this one; "
                         f"a DTensor is never gathered implicitly: redistribute it, or use the styles of "
                         f"sketchcore.torch.parallel")
    if layout in ("rank", "rows") and activation != "none":
        raise ValueError(f"{where} ({layout}): activation: expected 'none' (the output is a partial sum), got "
                         f"{activation!r}")
    if layout == "rows" and inner != "none":
        raise ValueError(f"{where} ({layout}): inner_activation: expected 'none' (the intermediate is a partial "
                         f"sum; RowwiseParallel of sketchcore.torch.parallel all-reduces it before σ), got {inner!r}")
    if layout != "replicated" and dropout_p > 0:
        raise ValueError(f"{where} ({layout}): dropout_p: expected 0 on sharded tensors (the masks of the shards "
                         f"would repeat each other), got {dropout_p}")
    return layout, batch_dim


def _factor_placements(layout: str, s_nd: int, u_nd: int) -> tuple[Any, Any]:
    """The placements of the S-side and U-side factors in a layout (2-D factors, or 3-D with
    the terms first: the rank layout shards the terms of 3-D ones)."""
    pS = {"rank": Shard(0 if s_nd == 3 else 1), "rows": Shard(s_nd - 2)}.get(layout, R)
    pU = {"rank": Shard(0), "columns": Shard(u_nd - 1)}.get(layout, R)
    return pS, pU


def _y_placement(layout: str, batch_dim: int, y_nd: int) -> Any:
    return {"replicated": R, "batch": Shard(batch_dim), "columns": Shard(y_nd - 1)}.get(layout, P)


def _forward_rule(op: str, positions: dict[str, Any]):
    def rule(*args: Any) -> list[tuple[list[Any], list[Any]]]:
        activation, dropout_p = args[positions["activation"]], args[positions["dropout_p"]]
        inner = _arg(args, positions["inner"], "none")
        x, bias = args[positions["x"]], args[positions["bias"]]
        S, U = [args[i] for i in positions["S"]], [args[i] for i in positions["U"]]
        outputs = []
        for dim in range(x.mesh.ndim):
            layout, batch = _layout(op, x, S, U, dim, activation, dropout_p, inner)
            pS, pU = _factor_placements(layout, S[0].ndim, U[0].ndim)
            y = _y_placement(layout, batch, x.ndim)
            z = {"batch": Shard(batch), "rank": Shard(x.ndim - 1), "rows": P}.get(layout, R)
            outputs.append((layout, batch, y, z, pS, pU))
        # one strategy per mesh dimension's layout; DTensor combines them (exactly one matches all)
        strategies = []
        for layout, batch, y, z, pS, pU in outputs:
            placements = [_input_placement(a) for a in args]
            placements[positions["x"]] = Shard(batch) if layout == "batch" else (
                Shard(x.ndim - 1) if layout == "rows" else R)
            for i in positions["S"]:
                placements[i] = pS
            for i in positions["U"]:
                placements[i] = pU
            if bias is not None:
                placements[positions["bias"]] = Shard(0) if layout == "columns" else (P if y == P else R)
            strategies.append(([y, z], placements))
        return strategies
    return rule


def _input_placement(arg: Any) -> Optional[Any]:
    """Replicate for a tensor argument (the seed), None for the others."""
    return R if isinstance(arg, DTensorSpec) else None


def _gradient(op: str, layout: str, batch: int, grad: DTensorSpec, dim: int) -> Any:
    """The placement the backward needs for the output's gradient; a ValueError where the
    gradient has one that would have to be gathered to get there."""
    want = {"batch": Shard(batch), "columns": Shard(grad.ndim - 1)}.get(layout, R)
    have = grad.placements[dim]
    if have == want or (want == R and isinstance(have, Partial)) or (have == R and isinstance(want, Shard)):
        return want  # as it is, an all-reduce of a partial sum, or a local slice
    raise ValueError(f"sketchcore::{op}_backward: mesh dimension {dim} ({layout}): the output's gradient: "
                     f"expected {_name(want)}, got {_name(have)} (it would have to be gathered)")


def _backward_rule(op: str, positions: dict[str, Any]):
    n_factors = len(positions["S"]) + len(positions["U"])

    def rule(*args: Any) -> list[tuple[list[Any], list[Any]]]:
        grad, forward = args[0], args[1:]
        # the forward's tensors follow grad; z sits after the factors, before the bias
        x = forward[positions["x"]]
        S, U = [forward[i] for i in positions["S"]], [forward[i] for i in positions["U"]]
        z_at = 1 + 1 + n_factors
        bias = args[z_at + 1]
        at = positions["backward"]
        activation, dropout_p, needs = args[at["activation"]], args[at["dropout_p"]], args[at["needs"]]
        inner = _arg(args, at["inner"], "none")
        strategies = []
        for dim in range(x.mesh.ndim):
            layout, batch = _layout(op, x, S, U, dim, activation, dropout_p, inner)
            pS, pU = _factor_placements(layout, S[0].ndim, U[0].ndim)
            px = {"batch": Shard(batch), "rows": Shard(x.ndim - 1)}.get(layout, R)
            pz = {"batch": Shard(batch), "rank": Shard(x.ndim - 1), "rows": P}.get(layout, R)
            pb = Shard(0) if layout == "columns" else (bias.placements[dim] if bias is not None else R)
            placements = [_input_placement(a) for a in args]
            placements[0] = _gradient(op, layout, batch, grad, dim)
            placements[1 + positions["x"]] = px
            for i in positions["S"]:
                placements[1 + i] = pS
            for i in positions["U"]:
                placements[1 + i] = pU
            placements[z_at] = pz
            if bias is not None:
                placements[z_at + 1] = pb
            # gradients: where the input was replicated but used on shards, a partial sum
            dx = {"columns": P, "rank": P}.get(layout, px)
            d_shared = P if layout in ("batch",) else None
            dS = d_shared or (P if layout == "columns" else pS)
            dU = d_shared or (P if layout == "rows" else pU)
            db = P if layout == "batch" else (Shard(0) if layout == "columns" else R)
            grads = [dx] + [None] * n_factors + [db]
            for i in positions["S"]:
                grads[i] = dS
            for i in positions["U"]:
                grads[i] = dU
            grads = [g if wanted else R for g, wanted in zip(grads, needs)]
            strategies.append((grads, placements))
        return strategies
    return rule


def _register() -> None:
    ops = torch.ops.sketchcore
    register_sharding(ops.sketched_linear.default)(_forward_rule("sketched_linear", _SKETCHED))
    register_sharding(ops.sklinear.default)(_forward_rule("sklinear", _SKLINEAR))
    register_sharding(ops.sketched_linear_backward.default)(_backward_rule("sketched_linear", _SKETCHED))
    register_sharding(ops.sklinear_backward.default)(_backward_rule("sklinear", _SKLINEAR))


_register()
