"""Checks of the tensor-parallel styles on single layers (run by tests/parallel/test_tp_styles.py on 2 and
4 processes): outputs, gradients and an optimizer step equal one process; the collectives each
style's documentation promises, counted and shaped by CommDebugMode; bad plans refused."""
from __future__ import annotations

import copy

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard
from torch.distributed.tensor.parallel import parallelize_module

from dist_common import assert_close, my_chunk
from sketchcore.torch import LowRankLinear, SKLinear
from sketchcore.torch.parallel import ColwiseParallel, RankParallel, RowwiseParallel
from sketchcore.torch.parallel._comm import CollectiveLog

D_IN, D_OUT, RANK, TERMS, LOW = 48, 32, 8, 2, 4
LEADING = (2, 3)  # leading batch dimensions of x: n = 6 rows


def _layers() -> dict[str, nn.Module]:
    torch.manual_seed(0)  # the same layers (SKLinear's fixed buffers included) on every rank
    layers = {"lowrank": LowRankLinear(D_IN, D_OUT, RANK),
              "lowrank_silu_out": LowRankLinear(D_IN, D_OUT, RANK, activation="silu"),
              "lowrank_nobias": LowRankLinear(D_IN, D_OUT, RANK, bias=False),
              "lowrank_inner_silu": LowRankLinear(D_IN, D_OUT, RANK, inner_activation="silu"),
              "lowrank_inner_gelu_out_relu": LowRankLinear(D_IN, D_OUT, RANK, inner_activation="gelu",
                                                           activation="relu"),
              "sklinear": SKLinear(D_IN, D_OUT, TERMS, LOW, init="linear")}
    return layers


_STYLES = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel, "rank": RankParallel}


def _cases():
    for layer_name, layer in _layers().items():
        for style_name, style in _STYLES.items():
            if style is RankParallel and layer.activation != "none":
                continue
            yield f"{layer_name}/{style_name}", layer, style


def _step(model: nn.Module, x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    y = model(x)
    (y * weights).sum().backward()
    return y


def _run(layer: nn.Module, style: type, mesh, log_forward=None, log_backward=None):
    """(reference layer, its output, x's grad), (parallel layer, its local output, local x's grad)."""
    ref = layer
    tp = parallelize_module(copy.deepcopy(layer), mesh, style())
    x = torch.randn(*LEADING, D_IN, requires_grad=True)
    w = torch.randn(*LEADING, D_OUT)
    y_ref = _step(ref, x, w)
    x_local = (my_chunk(x.detach()) if style is RowwiseParallel else x.detach().clone()).requires_grad_()
    w_local = my_chunk(w) if style is ColwiseParallel else w
    with log_forward or CollectiveLog():
        y = tp(x_local)
    with log_backward or CollectiveLog():
        (y * w_local).sum().backward()
    return (ref, y_ref, x.grad), (tp, y, x_local.grad)


def outputs_gradients_and_steps_equal_one_process() -> None:
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for name, layer, style in _cases():
        torch.manual_seed(1234)  # the same layer and data on every rank
        layer = copy.deepcopy(layer)
        for p in layer.parameters():
            p.data.normal_()
        (ref, y_ref, dx_ref), (tp, y, dx) = _run(layer, style, mesh)
        assert_close(y, my_chunk(y_ref) if style is ColwiseParallel else y_ref, f"{name}: output")
        assert_close(dx, my_chunk(dx_ref) if style is RowwiseParallel else dx_ref, f"{name}: dx")
        for pname, p_ref in ref.named_parameters():
            assert_close(tp.get_parameter(pname).grad, p_ref.grad, f"{name}: d{pname}")
        # SGD: AdamW turns a gradient that is 0 in one process and 1e-9 (rounding) under TP, as a
        # ReLU output gives, into steps of 0 and lr (the LLaMA checks use AdamW on smooth layers)
        opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
        opt_tp = torch.optim.SGD(tp.parameters(), lr=0.1, momentum=0.9)
        opt_ref.step()
        opt_tp.step()
        for pname, p_ref in ref.named_parameters():
            assert_close(tp.get_parameter(pname), p_ref, f"{name}: {pname} after an SGD step")


def _expected(name: str, style: type, layer: nn.Module) -> tuple[list, list]:
    """The (forward, backward) all-reduce shapes the style's documentation promises."""
    n = LEADING
    width = RANK if isinstance(layer, LowRankLinear) else 2 * TERMS * LOW
    if style is ColwiseParallel:
        return [], [(*n, width)]
    if style is RowwiseParallel:
        return [(*n, width)], []
    return [(*n, D_OUT)], [(*n, D_IN)]


def collectives_are_the_documented_ones() -> None:
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for name, layer, style in _cases():
        torch.manual_seed(0)
        forward, backward = CollectiveLog(), CollectiveLog()
        _run(copy.deepcopy(layer), style, mesh, forward, backward)
        want_fwd, want_bwd = _expected(name, style, layer)
        for log, want, phase in ((forward, want_fwd, "forward"), (backward, want_bwd, "backward")):
            got = sorted(c.shapes for c in log.calls)
            assert all(c.name == "allreduce_" for c in log.calls), f"{name} {phase}: {log.calls}"
            assert got == sorted(((s,) for s in want)), f"{name} {phase}: all-reduces of {got}, expected {want}"
            assert log.get_total_counts() == len(want), f"{name} {phase}: {log.get_comm_counts()}"


def _raises(error: type, match: str, module: nn.Module, style, mesh) -> None:
    try:
        parallelize_module(module, mesh, style)
    except error as e:
        assert match in str(e), f"{type(style).__name__} on {type(module).__name__}: {e!s} lacks {match!r}"
        return
    raise AssertionError(f"{style!r} on {module!r}: expected {error.__name__} ({match})")


def bad_plans_raise_in_parallelize_module() -> None:
    world = dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    _raises(TypeError, "expected one of LowRankLinear, SKLinear, nn.Linear, got Conv1d", nn.Conv1d(4, 4, 1),
            ColwiseParallel(), mesh)
    _raises(TypeError, "expected one of LowRankLinear, SKLinear, got Linear", nn.Linear(8, 8), RankParallel(), mesh)
    _raises(ValueError, f"rank: expected a multiple of the mesh size {world}, got {world + 1}",
            LowRankLinear(8, 8, world + 1), RankParallel(), mesh)
    _raises(ValueError, f"low_rank: expected a multiple of the mesh size {world}, got 1",
            SKLinear(8, 8, 1, 1), RankParallel(), mesh)
    _raises(ValueError, f"out_features: expected a multiple of the mesh size {world}, got {4 * world + 1}",
            LowRankLinear(8, 4 * world + 1, 2), ColwiseParallel(), mesh)
    _raises(ValueError, f"in_features: expected a multiple of the mesh size {world}, got {4 * world + 1}",
            nn.Linear(4 * world + 1, 8), RowwiseParallel(), mesh)
    _raises(ValueError, "dropout: expected 0 under tensor parallelism", LowRankLinear(8, 8, 4, dropout=0.1),
            ColwiseParallel(), mesh)
    _raises(ValueError, "activation: expected 'none'", LowRankLinear(8, 8, 4, activation="relu"), RankParallel(),
            mesh)
    if world == 4:
        mesh_2d = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        _raises(ValueError, "expected a 1-D (tensor-parallel) mesh, got 2 dimensions ('dp', 'tp')",
                LowRankLinear(8, 8, 4), ColwiseParallel(), mesh_2d)


def parallelized_sketched_layers_move_and_cast() -> None:
    """Module.to()/.double() on sharded factors (SKLinear repacks its factors on _apply)."""
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for name, layer, style in _cases():
        tp = parallelize_module(copy.deepcopy(layer), mesh, style())
        x = torch.randn(5, D_IN)
        x_local = my_chunk(x) if style is RowwiseParallel else x
        before = tp(x_local)
        tp.double()
        assert_close(tp(x_local.double()), before.double(), f"{name}: after .double()")


def dense_linear_goes_to_torch_styles() -> None:
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    torch.manual_seed(3)
    ref = nn.Sequential(nn.Linear(D_IN, D_OUT), nn.ReLU(), nn.Linear(D_OUT, D_IN))
    tp = parallelize_module(copy.deepcopy(ref), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    assert tp[0].weight.placements == (Shard(0),) and tp[2].weight.placements == (Shard(1),)
    x = torch.randn(5, D_IN)
    assert_close(tp(x), ref(x), "dense Colwise → Rowwise output")


if __name__ == "__main__":
    from dist_worker import main
    main(globals())
