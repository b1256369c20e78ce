"""The eager fast path: the operators' bodies under plain ``torch.autograd.Function``s.

A call through ``torch.ops.sketchcore.*`` pays for the dispatcher, torch.library's Python
autograd wrapper and its argument handling, twice per training step (forward and backward):
measured 560 µs per SKLinear forward+backward on a small layer on the CPU, where Panther's
own autograd.Function takes 255 µs, and on an H100 that overhead, not the GPU, set the step
time. Plain eager calls need none of what the dispatcher adds, so they come here; everything
else keeps the operators: TorchScript scripting and tracing, torch.compile, torch.func
transforms, autocast regions (whose dtype rule is registered on the operators) and tensor
subclasses (FakeTensor, DTensor, ...).
"""
from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from sketchcore.torch import _functorch, _ops

_PLAIN = (torch.Tensor, torch.nn.Parameter)


def applies(x: Tensor, *tensors: Optional[Tensor]) -> bool:
    """Whether a call on these tensors may take the fast path (see the module's docstring)."""
    if type(x) not in _PLAIN or any(t is not None and type(t) not in _PLAIN for t in tensors):
        return False
    if torch.jit.is_tracing() or torch.compiler.is_compiling() or _functorch.transforms_active():
        return False
    return not torch.is_autocast_enabled(x.device.type)


class SketchedLinear(torch.autograd.Function):
    """``sketchcore::sketched_linear`` with its registered backward, without the dispatcher."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, S: Tensor, U: Tensor, bias: Optional[Tensor], activation: str, scale: float,
                dropout_p: float, seed: Tensor) -> Tensor:
        inputs = (x, S, U, bias, activation, scale, dropout_p, seed)
        outputs = _ops._run_forward(*inputs)
        _ops._setup_context(ctx, inputs, outputs)  # what the operator's backward reads
        return outputs[0]

    @staticmethod
    def backward(ctx: Any, grad_y: Tensor) -> tuple[Optional[Tensor], ...]:
        return _ops._backward(ctx, grad_y, None, direct=True)


class SKLinear(torch.autograd.Function):
    """``sketchcore::sklinear`` with its registered backward, without the dispatcher. The
    packed factors [S1s; U2s] and [U1s; S2s] are joined once and kept for the backward."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, S1s: Tensor, S2s: Tensor, U1s: Tensor, U2s: Tensor, bias: Optional[Tensor],
                activation: str, dropout_p: float, seed: Tensor) -> Tensor:
        inputs = (x, S1s, S2s, U1s, U2s, bias, activation, dropout_p, seed)
        ctx.blocks = (_ops._joined(S1s, U2s), _ops._joined(U1s, S2s))  # detached: not saved tensors
        outputs = _ops._run_forward(x, *ctx.blocks, bias, activation, 1.0 / (2 * S1s.shape[0]), dropout_p, seed)
        _ops._sklinear_setup_context(ctx, inputs, outputs)
        return outputs[0]

    @staticmethod
    def backward(ctx: Any, grad_y: Tensor) -> tuple[Optional[Tensor], ...]:
        return _ops._sklinear_backward_rule(ctx, grad_y, None, blocks=ctx.blocks)


#: The seed of calls without dropout: never read, so one shared tensor instead of one per call.
NO_SEED = torch.zeros([], dtype=torch.int64)
