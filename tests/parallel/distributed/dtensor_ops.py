"""Checks of sketchcore's operators on DTensors (the rules of _dtensor_rules): every supported
layout computes on local shards, forward and backward, equal to one process, and without any
collective in the forward; other layouts raise naming the placements (tests/parallel/test_dtensor_ops.py)."""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

from dist_common import assert_close
from sketchcore.torch import sketched_linear, sklinear
import sketchcore.torch.parallel  # noqa: F401 - registers the rules
from sketchcore.torch.parallel._comm import CollectiveLog

R = Replicate()
N, D_IN, D_OUT, K, T = 6, 16, 8, 4, 2


def _layouts(x_nd: int, s_nd: int):
    """name → (x, S, U, bias) placements."""
    return {"replicated": (R, R, R, R), "batch": (Shard(0), R, R, R), "columns": (R, R, Shard(s_nd - 1), Shard(0)),
            "rank": (R, Shard(0 if s_nd == 3 else 1), Shard(0), R), "rows": (Shard(x_nd - 1), Shard(s_nd - 2), R, R)}


def _check(name: str, mesh, op, x, factors: list, sides: list[str], bias, placements, activation="none",
           inner="none") -> None:
    px, pS, pU, pb = placements
    leaves = [t.detach().clone().requires_grad_() for t in (x, *factors, bias)]
    dist_leaves = [distribute_tensor(t.detach(), mesh, [p]).requires_grad_()
                   for t, p in zip(leaves, [px, *[pS if s == "S" else pU for s in sides], pb])]
    y_ref = op(*leaves, activation, inner)
    with CollectiveLog() as log:
        y = op(*dist_leaves, activation, inner)
    assert log.get_total_counts() == 0, f"{name}: forward communicated {log.calls}"
    assert isinstance(y, DTensor), f"{name}: output is a {type(y).__name__}"
    assert_close(y.full_tensor(), y_ref, f"{name}: output")
    w = torch.randn_like(y_ref)
    (y_ref * w).sum().backward()
    (y * distribute_tensor(w, mesh, [R])).sum().backward()
    for i, (a, b) in enumerate(zip(dist_leaves, leaves)):
        assert_close(a.grad.full_tensor(), b.grad, f"{name}: gradient of input {i}")


def _lowrank(x, S, U, b, activation, inner):
    return sketched_linear(x, S, U, b, activation=activation, inner_activation=inner)


def _sklinear(x, S1s, S2s, U1s, U2s, b, activation, inner):
    return sklinear(x, S1s, S2s, U1s, U2s, b, activation=activation)


def supported_layouts_run_on_shards() -> None:
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    torch.manual_seed(0)
    x = torch.randn(N, D_IN)
    for name, placements in _layouts(2, 2).items():
        _check(f"sketched_linear 2-D {name}", mesh, _lowrank, x, [torch.randn(D_IN, K), torch.randn(K, D_OUT)],
               ["S", "U"], torch.randn(D_OUT), placements)
    for name, placements in _layouts(2, 3).items():
        _check(f"sketched_linear 3-D {name}", mesh, _lowrank, x,
               [torch.randn(T * 2, D_IN, K), torch.randn(T * 2, K, D_OUT)], ["S", "U"], torch.randn(D_OUT), placements)
    _check("sketched_linear columns, gelu", mesh, _lowrank, x, [torch.randn(D_IN, K), torch.randn(K, D_OUT)],
           ["S", "U"], torch.randn(D_OUT), _layouts(2, 2)["columns"], "gelu")
    for name, placements in _layouts(2, 2).items():
        if name != "rows":  # σ of a partial sum: refused (other_layouts_raise_naming_the_placements)
            _check(f"sketched_linear 2-D {name}, inner silu", mesh, _lowrank, x,
                   [torch.randn(D_IN, K), torch.randn(K, D_OUT)], ["S", "U"], torch.randn(D_OUT), placements,
                   inner="silu")
    for name, placements in _layouts(2, 3).items():
        if name == "rank":
            continue
        _check(f"sklinear {name}", mesh, _sklinear, x,
               [torch.randn(T, D_IN, K), torch.randn(T, K, D_OUT), torch.randn(T, K, D_OUT), torch.randn(T, D_IN, K)],
               ["S", "U", "U", "S"], torch.randn(D_OUT), placements)


def _raises(match: str, fn) -> None:
    try:
        fn()
    except RuntimeError as e:  # DTensor's dispatch wraps the rule's ValueError, message kept
        assert match in str(e), f"{e!s} lacks {match!r}"
        return
    raise AssertionError(f"expected an error ({match})")


def other_layouts_raise_naming_the_placements() -> None:
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    x, S, U = torch.randn(N, D_IN), torch.randn(D_IN, K), torch.randn(K, D_OUT)
    d = lambda t, p: distribute_tensor(t, mesh, [p])  # noqa: E731
    _raises("mesh dimension 0: x Shard(1), S side Replicate(), U side Replicate(): expected a layout",
            lambda: sketched_linear(d(x, Shard(1)), d(S, R), d(U, R)))
    _raises("x Replicate(), S side Shard(0), U side Replicate()",
            lambda: sketched_linear(d(x, R), d(S, Shard(0)), d(U, R)))
    _raises("(rows): activation: expected 'none' (the output is a partial sum), got 'relu'",
            lambda: sketched_linear(d(x, Shard(1)), d(S, Shard(0)), d(U, R), activation="relu"))
    _raises("(rows): inner_activation: expected 'none' (the intermediate is a partial sum",
            lambda: sketched_linear(d(x, Shard(1)), d(S, Shard(0)), d(U, R), inner_activation="silu"))
    _raises("(columns): dropout_p: expected 0 on sharded tensors",
            lambda: sketched_linear(d(x, R), d(S, R), d(U, Shard(1)), dropout_p=0.5))
    y = sketched_linear(d(x, R), d(S, R), d(U, Shard(1)).requires_grad_())
    grad = d(torch.randn(N, D_OUT), Shard(0))  # would need an all-gather to become Shard(1)
    _raises("the output's gradient: expected Shard(1), got Shard(0)", lambda: y.backward(grad))
    partial = DTensor.from_local(torch.randn(N, D_IN), mesh, [Partial()])
    _raises("x Partial()", lambda: sketched_linear(partial, d(S, R), d(U, R)))


if __name__ == "__main__":
    from dist_worker import main
    main(globals())
