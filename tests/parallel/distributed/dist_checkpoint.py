"""Distributed checkpoints of a sketched LLaMA: saved by FSDP2 + TP on a 2 × 2 mesh (4 processes),
loaded by TP on 2 processes and by one plain process, each equal bit for bit to the saved state
(model and optimizer). The directory is $SKETCHCORE_TEST_CHECKPOINT (run by tests/parallel/test_tp_checkpoint.py)."""
from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import parallelize_module

from dist_llama import loss_of, sketched_llama, tokens
from sketchcore.torch.parallel import llama_plan

FULL = StateDictOptions(full_state_dict=True)


def _paths() -> tuple[str, str]:
    root = os.environ["SKETCHCORE_TEST_CHECKPOINT"]
    return os.path.join(root, "dcp"), os.path.join(root, "reference.pt")


def _trained_step(model, optimizer) -> None:
    loss_of(model, tokens(2, seed=7)).backward()
    optimizer.step()
    optimizer.zero_grad()


def _flat(state: dict) -> dict:
    """Model and optimizer state as one flat dict of tensors and numbers."""
    out = {}
    def walk(prefix, value):
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}", v)
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                walk(f"{prefix}.{i}", v)
        else:
            out[prefix] = value.full_tensor() if isinstance(value, DTensor) else value
    walk("", state)
    return out


def assert_equal_to_reference(model, optimizer, reference_path: str) -> None:
    model_state, optim_state = get_state_dict(model, optimizer, options=FULL)
    got = _flat({"model": model_state, "optim": optim_state})
    want = torch.load(reference_path, weights_only=True)
    assert sorted(got) == sorted(want), f"keys differ: {sorted(set(got) ^ set(want))[:5]}"
    for key, value in want.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(got[key].cpu(), value), f"{key}: not bit-exact after loading"
        else:
            assert got[key] == value, f"{key}: {got[key]!r} != {value!r}"


def save_from_fsdp2_tp_on_4_ranks() -> None:
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    model = parallelize_module(sketched_llama(), mesh["tp"], llama_plan(sketched_llama()))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    _trained_step(model, optimizer)
    directory, reference = _paths()
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=directory)
    full_model, full_optim = get_state_dict(model, optimizer, options=FULL)
    flat = _flat({"model": full_model, "optim": full_optim})
    if dist.get_rank() == 0:
        torch.save(flat, reference)
    dist.barrier()


def load_into(model, optimizer) -> None:
    directory, _ = _paths()
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=directory)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])


def fresh_model_and_optimizer(tp_mesh=None):
    model = sketched_llama(seed=5)  # other values than the saved ones
    if tp_mesh is not None:
        model = parallelize_module(model, tp_mesh, llama_plan(model))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    _trained_step(model, optimizer)  # optimizer state of the right structure, other values
    return model, optimizer


def load_into_tp_on_2_ranks() -> None:
    model, optimizer = fresh_model_and_optimizer(init_device_mesh("cpu", (dist.get_world_size(),)))
    load_into(model, optimizer)
    assert_equal_to_reference(model, optimizer, _paths()[1])


if __name__ == "__main__":
    from dist_worker import main
    main(globals())
