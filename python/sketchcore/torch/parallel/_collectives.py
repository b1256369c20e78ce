"""The two collectives of tensor parallelism as differentiable functions over local tensors (the
pair Megatron-LM calls f and g), so that each parallel style says in its own code which tensor
crosses the process group, in which direction, and nothing else does.

* :func:`reduce_gradient`: identity forward, all-reduce (sum) of the gradient backward. For a
  replicated tensor that each rank uses on a different shard of a product: each rank's gradient
  is a partial sum.
* :func:`reduce_value`: all-reduce (sum) forward, identity backward. For partial sums that each
  rank computed from its shard; the gradient of the (replicated) sum is already the gradient of
  each partial sum.

Both run ``torch.distributed.all_reduce`` on a fresh tensor (the ``c10d.allreduce_`` operator),
which ``CommDebugMode`` counts.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor


def _all_reduced(t: Tensor, group: Any) -> Tensor:
    out = t.contiguous().clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM, group=group)
    return out


class _ReduceGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, t: Tensor, group: Any) -> Tensor:
        ctx.group = group
        return t.view_as(t)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return _all_reduced(grad, ctx.group), None


class _ReduceValue(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, t: Tensor, group: Any) -> Tensor:
        return _all_reduced(t, group)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return grad, None


def reduce_gradient(t: Tensor, group: Any) -> Tensor:
    """``t`` (a view), whose gradient is all-reduced over ``group`` in the backward; ``t``
    itself when it needs no gradient (no collective then)."""
    if not (torch.is_grad_enabled() and t.requires_grad):
        return t
    return _ReduceGradient.apply(t, group)


def reduce_value(t: Tensor, group: Any) -> Tensor:
    """The sum of ``t`` over ``group`` (all-reduce); its gradient passes through unchanged."""
    return _ReduceValue.apply(t, group)
