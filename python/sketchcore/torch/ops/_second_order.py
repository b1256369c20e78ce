"""Second-order autograd. When a backward is itself recorded (``create_graph=True``: gradient
penalties, Hessian-vector products, double backward), the operators' gradients come from a
differentiable composite of torch ops — the same function, ``dropout(act(scale·(x Sp) Up +
b))``, with the core's dropout mask — instead of the fused core backward, whose outputs torch
could not differentiate again. First-order training never takes this path."""
from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import Tensor

import sketchcore
from sketchcore.torch._common import TORCH_ACTIVATIONS



def _dropout_scale(x: Tensor, d_out: int, dropout_p: float, seed: Tensor) -> Optional[Tensor]:
    """The core's dropout mask times 1/(1 − p) (0 where dropped), for output shape
    x.shape[:-1] + (d_out,): the core applied to all-ones operands with the same seed."""
    if dropout_p == 0:
        return None
    ones = x.detach().new_ones((*x.shape[:-1], 1))
    return sketchcore.sketched_matmul(ones, ones.new_ones(1, 1), ones.new_ones(1, d_out), dropout_p=dropout_p,
                                      seed=int(seed.item()))


def composite(x: Tensor, S: Tensor, U: Tensor, bias: Optional[Tensor], activation: str, scale: float,
              dropout_p: float, seed: Tensor, inner_activation: str = "none") -> Tensor:
    """``dropout(act(scale · Σ_t σ(x S_t) U_t + bias))`` in differentiable torch ops (σ: the
    inner activation)."""
    Sp = S if S.dim() == 2 else S.permute(1, 0, 2).reshape(S.shape[1], -1)  # [S_1 … S_T]
    Up = U if U.dim() == 2 else U.reshape(-1, U.shape[-1])                   # [U_1; …; U_T]
    y = TORCH_ACTIVATIONS[inner_activation](x @ Sp) @ Up * scale
    if bias is not None:
        y = y + bias
    y = TORCH_ACTIVATIONS[activation](y)
    mask = _dropout_scale(x, Up.shape[-1], dropout_p, seed)
    return y if mask is None else y * mask


def gradients(inputs: tuple[Optional[Tensor], ...], needs: list[bool], grad_y: Tensor,
              forward: Callable[..., Tensor]) -> list[Optional[Tensor]]:
    """d⟨grad_y, forward(*inputs)⟩ / d inputs[i] for the needed inputs, as differentiable
    tensors (None elsewhere)."""
    wanted = [t for t, need in zip(inputs, needs) if need and t is not None]
    with torch.enable_grad():
        y = forward(*inputs)
        computed = iter(torch.autograd.grad(y, wanted, grad_y, create_graph=True, allow_unused=True))
    result: list[Optional[Tensor]] = []
    for t, need in zip(inputs, needs):
        g = next(computed) if need and t is not None else None
        result.append(torch.zeros_like(t) if g is None and need and t is not None else g)
    return result


def vjp(inputs: tuple[Optional[Tensor], ...], needs: list[bool], grad_y: Tensor,
        forward: Callable[..., Tensor]) -> list[Optional[Tensor]]:
    """The same gradients through ``torch.func.vjp``: usable inside a torch.func transform
    (where the saved tensors carry no ordinary autograd history) and differentiable by it."""
    present = [i for i, t in enumerate(inputs) if t is not None]

    def over_present(*tensors: Tensor) -> Tensor:
        full = list(inputs)
        for i, t in zip(present, tensors):
            full[i] = t
        return forward(*full)

    _, pullback = torch.func.vjp(over_present, *[inputs[i] for i in present])
    computed = dict(zip(present, pullback(grad_y)))
    return [computed[i] if need and i in computed else None for i, need in enumerate(needs)]
