"""The eager fast path: the operators' math under plain ``torch.autograd.Function``s, one core
call per direction through ``sketchcore._fastcall``, and no autograd node at all where no
graph is recorded (``torch.no_grad``, inference, or nothing requiring gradient).

A call through ``torch.ops.sketchcore.*`` pays for the dispatcher, torch.library's Python
autograd wrapper and its argument handling, twice per training step (forward and backward);
on small layers that overhead, not the arithmetic, sets the step time (figures in
docs/performance_results.md). The public array functions add keyword parsing, Python-side
checks and a DLPack import object per operand. Plain eager calls need none of that, so they
come here; everything else keeps
the operators: TorchScript scripting and tracing, torch.compile, torch.func transforms and
tensor subclasses (FakeTensor, DTensor, ...).

Autocast regions of the input's device (CPU or CUDA) stay here too: the operands are cast
first, by the operators' own rule (``_ops.autocast_plan``: floating-point tensors other than
float64 to the region's dtype, or, where the CPU would only widen them again, a float32
computation whose output is rounded), with autograd-recorded casts, so the output has the
region's dtype and float32 parameters get float32 gradients, as through the operators'
autocast kernels (the operators would add their dispatch costs to every autocast step).
"""
from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from sketchcore import _fastcall
from sketchcore.torch.ops import _functorch, _ops

_PLAIN = (torch.Tensor, torch.nn.Parameter)
_CODES = _fastcall.ACTIVATION_CODES
_is_grad_enabled = torch.is_grad_enabled
_is_autocast_enabled = torch.is_autocast_enabled
_is_compiling = torch.compiler.is_compiling
_tracing_state = getattr(torch._C, "_get_tracing_state", None)
#: The device types whose autocast rule the operators register (_ops); autocast regions of
#: others keep the operators (whatever torch does for them there).
_AUTOCAST_DEVICES = ("cpu", "cuda")


def applies(x: Tensor, *tensors: Optional[Tensor]) -> bool:
    """Whether a call on these tensors may take the fast path (see the module's docstring)."""
    if type(x) not in _PLAIN:
        return False
    for t in tensors:
        if t is not None and type(t) not in _PLAIN:
            return False
    tracing = _tracing_state() is not None if _tracing_state is not None else torch.jit.is_tracing()
    if tracing or _is_compiling() or _functorch.transforms_active():
        return False
    device = x.device.type
    if device == "meta":  # no data: the operators' fake kernels give the shapes
        return False
    return device in _AUTOCAST_DEVICES or not _is_autocast_enabled(device)


def _autocast(x: Tensor, *tensors: Optional[Tensor]) -> tuple[tuple[Any, ...], Optional[torch.dtype]]:
    """(x, *tensors) cast for an autocast region of x's device, and the dtype to cast the output
    to, as the operators' autocast kernel does (_ops.autocast_plan); unchanged, None outside
    one. The casts are ordinary ``Tensor.to`` calls, so autograd records them and casts the
    gradients back."""
    device = x.device.type
    if not _is_autocast_enabled(device):
        return (x, *tensors), None
    return _ops.autocast_plan((x, *tensors), device, torch.get_autocast_dtype(device))


def _records(x: Tensor, S: Tensor, U: Tensor, bias: Optional[Tensor]) -> bool:
    """Whether autograd would record the call (else no Function and no intermediate)."""
    return _is_grad_enabled() and (x.requires_grad or S.requires_grad or U.requires_grad
                                   or (bias is not None and bias.requires_grad))


def _seed_value(seed: Tensor, dropout_p: float) -> int:
    return int(seed.item()) if dropout_p > 0 else 0


class SketchedLinear(torch.autograd.Function):
    """``sketchcore::sketched_linear`` with its registered backward, without the dispatcher."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, S: Tensor, U: Tensor, bias: Optional[Tensor], activation: str, scale: float,
                dropout_p: float, seed: Tensor, inner_activation: str = "none") -> Tensor:
        ctx.seed_value = _seed_value(seed, dropout_p)
        y, z = _fastcall.forward(x, S, U, bias, _CODES[activation], scale, dropout_p, ctx.seed_value, True,
                                 inner_activation=_CODES[inner_activation])
        ctx.save_for_backward(x, S, U, bias, z, seed)  # the layout _ops._backward reads
        ctx.activation, ctx.scale, ctx.dropout_p = activation, scale, dropout_p
        ctx.inner_activation, ctx.non_tensor_inputs = inner_activation, 5
        return y

    @staticmethod
    def backward(ctx: Any, grad_y: Tensor) -> tuple[Optional[Tensor], ...]:
        if _is_grad_enabled():  # create_graph=True: the differentiable composite (second order)
            return _ops._backward(ctx, grad_y, None, direct=True)
        x, S, U, bias, z, _ = ctx.saved_tensors
        n = ctx.needs_input_grad
        grads = _fastcall.backward(grad_y, x, S, U, z, bias, _CODES[ctx.activation], ctx.scale, ctx.dropout_p,
                                   ctx.seed_value, n[0], n[1], n[2], n[3],
                                   inner_activation=_CODES[ctx.inner_activation])
        return (*grads, None, None, None, None, None)


def sketched_linear(x: Tensor, S: Tensor, U: Tensor, bias: Optional[Tensor], activation: str, scale: float,
                    dropout_p: float, seed: Tensor, inner_activation: str = "none") -> Tensor:
    """The eager ``sketched_linear``: the Function when autograd records, else one core call."""
    (x, S, U, bias), out_dtype = _autocast(x, S, U, bias)
    if _records(x, S, U, bias):
        y = SketchedLinear.apply(x, S, U, bias, activation, scale, dropout_p, seed, inner_activation)
    else:
        y = _fastcall.forward(x, S, U, bias, _CODES[activation], scale, dropout_p, _seed_value(seed, dropout_p), False,
                              inner_activation=_CODES[inner_activation])
    return y if out_dtype is None else y.to(out_dtype)  # inline: every eager call passes here


def _packed_forward(x: Tensor, S1s: Tensor, S2s: Tensor, U1s: Tensor, U2s: Tensor, bias: Optional[Tensor],
                    code: int, dropout_p: float, seed_value: int, keep: bool) -> tuple[Any, Any]:
    """SKLinear's forward on [S1s; U2s], [U1s; S2s]: views when the factors are packed in memory
    (SKLinear keeps them so), else concatenated copies, which are returned for the backward."""
    scale = 1.0 / (2 * S1s.shape[0])
    result = _fastcall.forward(x, S1s, U1s, bias, code, scale, dropout_p, seed_value, keep, U2s, S2s)
    if result is not None:
        return result, None
    blocks = (torch.cat([S1s.detach(), U2s.detach()]), torch.cat([U1s.detach(), S2s.detach()]))
    return _fastcall.forward(x, blocks[0], blocks[1], bias, code, scale, dropout_p, seed_value, keep), blocks


class SKLinear(torch.autograd.Function):
    """``sketchcore::sklinear`` with its registered backward, without the dispatcher. The
    packed factors [S1s; U2s] and [U1s; S2s] are read as views (joined in the core's call
    path, no torch view per call)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, S1s: Tensor, S2s: Tensor, U1s: Tensor, U2s: Tensor, bias: Optional[Tensor],
                activation: str, dropout_p: float, seed: Tensor) -> Tensor:
        ctx.seed_value = _seed_value(seed, dropout_p)
        (y, z), ctx.blocks = _packed_forward(x, S1s, S2s, U1s, U2s, bias, _CODES[activation], dropout_p,
                                             ctx.seed_value, True)
        ctx.save_for_backward(x, S1s, S2s, U1s, U2s, bias, z, seed)  # the layout of _ops' backward rule
        ctx.activation, ctx.dropout_p = activation, dropout_p
        return y

    @staticmethod
    def backward(ctx: Any, grad_y: Tensor) -> tuple[Optional[Tensor], ...]:
        if _is_grad_enabled():  # second order
            return _ops._sklinear_backward_rule(ctx, grad_y, None)
        x, S1s, S2s, U1s, U2s, bias, z, _ = ctx.saved_tensors
        need_x, need_S1, need_S2, need_U1, need_U2, need_b = ctx.needs_input_grad[:6]
        T = S1s.shape[0]
        # dS of [S1s; U2s] and dU of [U1s; S2s] only for the terms whose factors need gradients
        # (for SKLinear, whose U buffers are fixed, half of each: a quarter of the FLOPs).
        s_range, u_range = _ops._covering(need_S1, need_U2, T), _ops._covering(need_U1, need_S2, T)
        factors = (S1s, U1s, U2s, S2s) if ctx.blocks is None else (*ctx.blocks, None, None)
        grads = _fastcall.backward(grad_y, x, factors[0], factors[1], z, bias, _CODES[ctx.activation],
                                   1.0 / (2 * T), ctx.dropout_p, ctx.seed_value, need_x, need_S1 or need_U2,
                                   need_U1 or need_S2, need_b, factors[2], factors[3], *s_range, *u_range)
        if grads is None:  # the factors were repacked between forward and backward
            blocks = (torch.cat([S1s, U2s]), torch.cat([U1s, S2s]))
            grads = _fastcall.backward(grad_y, x, *blocks, z, bias, _CODES[ctx.activation], 1.0 / (2 * T),
                                       ctx.dropout_p, ctx.seed_value, need_x, need_S1 or need_U2, need_U1 or need_S2,
                                       need_b, None, None, *s_range, *u_range)
        dx, dS, dU, db = grads
        dS1, dU2 = _halves(dS, need_S1, need_U2, T)
        dU1, dS2 = _halves(dU, need_U1, need_S2, T)
        return dx, dS1, dS2, dU1, dU2, db, None, None, None


def _halves(grad: Optional[Tensor], first: bool, second: bool, T: int) -> tuple[Optional[Tensor], Optional[Tensor]]:
    """The gradients of the two halves of a packed factor from the gradient of the terms that
    cover the requested ones (see _ops._covering)."""
    if grad is None or not (first and second):
        return (grad if first else None), (grad if second else None)
    return grad[:T], grad[T:]


def sklinear(x: Tensor, S1s: Tensor, S2s: Tensor, U1s: Tensor, U2s: Tensor, bias: Optional[Tensor],
             activation: str, dropout_p: float, seed: Tensor) -> Tensor:
    """The eager ``sklinear``: the Function when autograd records, else one core call. Under
    autocast the four factors are cast one by one and joined by one concatenation per block
    (measured 0.05 ms a step at 1024 → 1024, T 2, k 32: less than the noise of its 17 ms)."""
    (x, S1s, S2s, U1s, U2s, bias), out_dtype = _autocast(x, S1s, S2s, U1s, U2s, bias)
    if _is_grad_enabled() and (x.requires_grad or S1s.requires_grad or S2s.requires_grad or U1s.requires_grad
                               or U2s.requires_grad or (bias is not None and bias.requires_grad)):
        y = SKLinear.apply(x, S1s, S2s, U1s, U2s, bias, activation, dropout_p, seed)
    else:
        y = _packed_forward(x, S1s, S2s, U1s, U2s, bias, _CODES[activation], dropout_p, _seed_value(seed, dropout_p),
                            False)[0]
    return y if out_dtype is None else y.to(out_dtype)


#: The seed of calls without dropout: never read, so one shared tensor instead of one per call.
NO_SEED = torch.zeros([], dtype=torch.int64)
