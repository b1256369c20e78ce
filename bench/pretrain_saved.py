"""What autograd keeps between one training forward and its backward (bench/pretrain.py's
"saved activations"): exact byte counts, one per storage, parameters left out, independent of the
machine's load; and, for ``--saved-only``, the largest kept storages with the operation that
produced them (the saved tensor's ``grad_fn``, or ``leaf``/``constant``).

In the memory mode (``low_rank_activations``) a saved tensor packed as a recipe counts only the
tensors its recipe holds (the layers' Z, constants such as rotary tables), once each.
"""
from __future__ import annotations

import contextlib
from typing import Any

import torch

from sketchcore.torch import low_rank_activations
from sketchcore.torch.ops import _memory_mode


def kept_storages(model: torch.nn.Module, batch: torch.Tensor, memory_mode: bool,
                  autocast: str | None = None) -> dict[int, dict[str, Any]]:
    """The storages kept for the backward of one forward on `batch` (parameters left out), by
    address: bytes, shape, dtype and producer of the first tensor seen on each. Runs the backward.
    `autocast` ("bfloat16", as the gpu preset trains) runs the forward in an autocast region of
    the batch's device, so that the count is the one of that training, also where it is taken
    on the CPU."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    packs: list[Any] = []

    def pack(t: torch.Tensor) -> Any:
        packs.append(_memory_mode._pack(t) if memory_mode else t)
        return packs[-1]

    with contextlib.ExitStack() as stack:
        if autocast is not None:
            stack.enter_context(torch.autocast(batch.device.type, dtype=getattr(torch, autocast)))
        if memory_mode:
            stack.enter_context(low_rank_activations())
        stack.enter_context(torch.autograd.graph.saved_tensors_hooks(pack, _memory_mode._unpack))
        loss = model(input_ids=batch, labels=batch).loss
    kept: dict[int, dict[str, Any]] = {}
    # counted after the forward: a function's own output it saved becomes a recipe once registered
    for held in (t for packed in packs for t in _memory_mode.held_tensors(packed)):
        address = held.untyped_storage().data_ptr()
        if address not in params and address not in kept:
            producer = type(held.grad_fn).__name__ if held.grad_fn is not None else "leaf/constant"
            kept[address] = {"bytes": held.untyped_storage().nbytes(), "shape": tuple(held.shape),
                             "dtype": str(held.dtype).removeprefix("torch."), "producer": producer}
    del packs
    loss.backward()
    model.zero_grad(set_to_none=True)
    return kept


def saved_activation_bytes(model: torch.nn.Module, batch: torch.Tensor, memory_mode: bool,
                           autocast: str | None = None) -> int:
    """Bytes autograd keeps between one training forward and its backward (see the module)."""
    return sum(s["bytes"] for s in kept_storages(model, batch, memory_mode, autocast).values())


def largest(kept: dict[int, dict[str, Any]], count: int) -> list[str]:
    """Markdown lines: the `count` largest kept storages grouped by (producer, shape, dtype)."""
    groups: dict[tuple[str, tuple[int, ...], str], list[int]] = {}
    for s in kept.values():
        groups.setdefault((s["producer"], s["shape"], s["dtype"]), []).append(s["bytes"])
    ranked = sorted(groups.items(), key=lambda item: -sum(item[1]))[:count]
    lines = ["| producer | shape | dtype | storages | MiB |", "| --- | --- | --- | ---: | ---: |"]
    lines += [f"| {p} | {'×'.join(map(str, shape))} | {dtype} | {len(b)} | {sum(b) / 2**20:.2f} |"
              for (p, shape, dtype), b in ranked]
    return lines
