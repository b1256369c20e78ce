"""Checks of a sketched LLaMA under TP, FSDP2 + TP (2-D mesh, float32 and bfloat16 mixed
precision) and DDP against one process (run by tests/parallel/test_tp_llama.py)."""
from __future__ import annotations

import copy

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import parallelize_module
from torch.nn.parallel import DistributedDataParallel

from dist_common import assert_close
from dist_llama import loss_of, sketched_llama, tokens
from sketchcore.torch.parallel import llama_plan


def _compare(ref, model, what: str, tol: float = 1e-5, steps: bool = True) -> None:
    for name, p_ref in ref.named_parameters():
        p = model.get_parameter(name.removeprefix("module.")) if hasattr(model, "get_parameter") else None
        assert_close(p.grad, p_ref.grad, f"{what}: grad of {name}", tol)
    if not steps:
        return
    # SGD with momentum: AdamW divides by √v, so a gradient near 0 whose rounding differs between
    # one process and TP (1e-9 against 1e-10) moves its weight by different fractions of lr
    for m in (ref, model):
        torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9).step()
    for name, p_ref in ref.named_parameters():
        assert_close(model.get_parameter(name), p_ref, f"{what}: {name} after an SGD step", tol)


def _sketched_layers_are_sharded(model) -> None:
    q = model.model.layers[0].self_attn.q_proj
    assert isinstance(q.U, DTensor), f"q_proj.U is a {type(q.U).__name__}, not a DTensor"


def tensor_parallel_equals_one_process() -> None:
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    ref = sketched_llama()
    model = parallelize_module(copy.deepcopy(ref), mesh, llama_plan(ref))
    _sketched_layers_are_sharded(model)
    ids = tokens(2)
    loss_ref, loss = loss_of(ref, ids), loss_of(model, ids)
    assert_close(loss, loss_ref, "TP loss")
    loss_ref.backward()
    loss.backward()
    _compare(ref, model, "TP")


def _fsdp_tp(ref, mp=None):
    world = dist.get_world_size()
    mesh = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("dp", "tp"))
    model = parallelize_module(copy.deepcopy(ref), mesh["tp"], llama_plan(ref))
    kwargs = {"mesh": mesh["dp"], **({"mp_policy": mp} if mp else {})}
    for layer in model.model.layers:
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    return model, mesh["dp"].get_local_rank(), mesh["dp"].size()


def fsdp2_tp_equals_one_process() -> None:
    ref = sketched_llama()
    model, dp_rank, dp_size = _fsdp_tp(ref)
    ids = tokens(2 * dp_size)
    loss_ref = loss_of(ref, ids)
    loss = loss_of(model, ids.chunk(dp_size)[dp_rank])  # equal token counts: the mean of the means
    loss_ref.backward()
    loss.backward()
    _compare(ref, model, "FSDP2 + TP")


def fsdp2_tp_bfloat16_mixed_precision() -> None:
    ref = sketched_llama()
    model, dp_rank, dp_size = _fsdp_tp(ref, MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                                                 reduce_dtype=torch.float32))
    ids = tokens(2 * dp_size)
    loss_ref = loss_of(ref, ids)
    loss = loss_of(model, ids.chunk(dp_size)[dp_rank])
    assert loss.dtype == torch.float32  # HF upcasts the logits
    total = loss.detach().clone()
    dist.all_reduce(total)
    assert_close(total / dist.get_world_size(), loss_ref, "bfloat16 loss", 2e-2)
    loss_ref.backward()
    loss.backward()
    assert model.model.layers[0].self_attn.q_proj.S.grad.dtype == torch.float32  # reduce_dtype
    _compare(ref, model, "FSDP2 + TP (bfloat16)", tol=6e-2, steps=False)


def ddp_equals_one_process() -> None:
    ref = sketched_llama()
    model = DistributedDataParallel(copy.deepcopy(ref))
    world, rank = dist.get_world_size(), dist.get_rank()
    ids = tokens(2 * world)
    loss_of(ref, ids).backward()
    loss_of(model, ids.chunk(world)[rank]).backward()
    _compare(ref, model.module, "DDP")


if __name__ == "__main__":
    from dist_worker import main
    main(globals())
