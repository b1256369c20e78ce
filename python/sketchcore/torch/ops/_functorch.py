"""torch.func support: batching rules (``vmap``) for the operators, and an autograd.Function
path for ``torch.func.grad``/``vjp``/``jacrev``.

Batching: every operator takes inputs with any leading dimensions, so a batch dimension on
``x`` (and on ``grad`` for the backwards) alone is moved to the front and handled by one call;
a batch dimension on the factors or the bias runs one call per batch element (no fallback
warning either way).

Gradients: torch.library's generated autograd wrapper is rejected by functorch transforms in
this torch release (pytorch/pytorch#170834), so while a transform is active the public
functions go through :class:`SketchedLinearFunction`, whose backward calls the same operators.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch import Tensor

from sketchcore.torch.ops import _private, _second_order


def _moved(t: Optional[Tensor], dim: Optional[int]) -> Optional[Tensor]:
    return t if t is None or dim is None else t.movedim(dim, 0)


def _batch_size(args: tuple[Any, ...], dims: tuple[Optional[int], ...]) -> int:
    return next(a.shape[d] for a, d in zip(args, dims) if isinstance(a, Tensor) and d is not None)


def _each(op: Callable[..., Any], args: tuple[Any, ...], dims: tuple[Optional[int], ...]) -> tuple[Any, Any]:
    """One call per batch element (the batch dimension of each batched input moved to 0),
    stacked along dimension 0."""
    moved = [_moved(a, d) if isinstance(a, Tensor) else a for a, d in zip(args, dims)]
    results = [op(*[m[i] if isinstance(m, Tensor) and d is not None else m for m, d in zip(moved, dims)])
               for i in range(_batch_size(args, dims))]
    stacked = tuple(torch.stack([r[j] for r in results]) for j in range(len(results[0])))
    return stacked, tuple(0 for _ in stacked)


def _rule(op_name: str, dropout_position: Optional[int]) -> Callable[..., Any]:
    """A batching rule for ``sketchcore::op_name``: one call when only x (argument 0, whose
    leading dimensions are free) is batched and no dropout mask is drawn (a mask depends on the
    row index, so a batch folded into the rows would give each element a different mask than
    calling the operator on it alone); else one call per batch element."""
    def rule(info: Any, in_dims: tuple[Optional[int], ...], *args: Any) -> tuple[Any, Any]:
        op = getattr(torch.ops.sketchcore, op_name).default
        only_x = all(d is None for d in in_dims[1:]) and in_dims[0] is not None
        no_dropout = dropout_position is None or args[dropout_position] == 0
        if dropout_position is not None and only_x and no_dropout:
            outputs = op(args[0].movedim(in_dims[0], 0), *args[1:])
            return outputs, tuple(0 for _ in outputs)
        return _each(op, args, in_dims)
    return rule


def register_batching_rules() -> None:
    # Forward operators (dropout_p at position 6 and 7): y and Z follow x's leading dimensions.
    torch.library.register_vmap("sketchcore::sketched_linear", _rule("sketched_linear", 6))
    torch.library.register_vmap("sketchcore::sklinear", _rule("sklinear", 7))
    # Backward operators: the factor gradients sum over rows, so each element is its own call.
    torch.library.register_vmap("sketchcore::sketched_linear_backward", _rule("sketched_linear_backward", None))
    torch.library.register_vmap("sketchcore::sklinear_backward", _rule("sklinear_backward", None))


class SketchedLinearFunction(torch.autograd.Function):
    """``sketched_linear`` as an autograd.Function with ``setup_context``, for torch.func."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x: Tensor, S: Tensor, U: Tensor, bias: Optional[Tensor], activation: str, scale: float,
                dropout_p: float, seed: Tensor, inner_activation: str = "none") -> Tensor:
        y, _ = torch.ops.sketchcore.sketched_linear(x, S, U, bias, activation, scale, dropout_p, seed,
                                                    inner_activation)
        return y

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        x, S, U, bias, activation, scale, dropout_p, seed = inputs[:8]
        ctx.save_for_backward(x, S, U, bias, seed)
        ctx.save_for_forward(x, S, U, bias, seed)
        ctx.activation, ctx.scale, ctx.dropout_p = activation, scale, dropout_p
        ctx.inner_activation = inputs[8] if len(inputs) > 8 else "none"
        ctx.non_tensor_inputs = len(inputs) - 4

    @staticmethod
    def jvp(ctx: Any, x_t: Optional[Tensor], S_t: Optional[Tensor], U_t: Optional[Tensor], b_t: Optional[Tensor],
            *_: Any) -> Tensor:
        """Forward mode (jvp, jacfwd, hessian) through the differentiable composite."""
        x, S, U, bias, seed = ctx.saved_tensors
        primals = [t for t in (x, S, U, bias) if t is not None]
        tangents = [torch.zeros_like(p) if t is None else t
                    for p, t in zip((x, S, U, bias), (x_t, S_t, U_t, b_t)) if p is not None]

        def forward(*tensors: Tensor) -> Tensor:
            x, S, U = tensors[:3]
            return _second_order.composite(x, S, U, tensors[3] if len(tensors) > 3 else None, ctx.activation,
                                           ctx.scale, ctx.dropout_p, seed, ctx.inner_activation)

        return torch.func.jvp(forward, tuple(primals), tuple(tangents))[1]

    @staticmethod
    def backward(ctx: Any, grad_y: Tensor) -> tuple[Any, ...]:
        x, S, U, bias, seed = ctx.saved_tensors
        needs = list(ctx.needs_input_grad[:4])

        def forward(x: Tensor, S: Tensor, U: Tensor, b: Optional[Tensor]) -> Tensor:
            return _second_order.composite(x, S, U, b, ctx.activation, ctx.scale, ctx.dropout_p, seed,
                                           ctx.inner_activation)

        # The differentiable composite: under a transform the backward may itself be transformed.
        return (*_second_order.vjp((x, S, U, bias), needs, grad_y, forward), *(None,) * ctx.non_tensor_inputs)


transforms_active = _private.functorch_active
