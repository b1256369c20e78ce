"""sketchcore's sketched GEMM as torch custom operators (``sketchcore::sketched_linear``,
``sketchcore::sklinear`` and their backwards): real kernels over the public Python API, fake
(meta) kernels, autograd and autocast registration. Importing this module registers them."""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

import sketchcore

from sketchcore.torch.ops import _private, _second_order

def _seed_value(seed: Tensor, dropout_p: float) -> Optional[int]:
    return int(seed.item()) if dropout_p > 0 else None


def _run_forward(x: Tensor, S: Tensor, U: Tensor, bias: Optional[Tensor], activation: str, scale: float,
                 dropout_p: float, seed: Tensor, inner_activation: str = "none") -> tuple[Tensor, Tensor]:
    """y and the saved intermediate Z = x·[S_1 … S_T] (before the inner activation), allocated
    by torch, written by the core."""
    y = x.new_empty((*x.shape[:-1], U.shape[-1]))
    z = x.new_empty((*x.shape[:-1], _inner_width(S)))
    sketchcore.sketched_matmul(x.detach(), S.detach(), U.detach(), bias=None if bias is None else bias.detach(),
                               activation=activation, scale=scale, dropout_p=dropout_p,
                               seed=_seed_value(seed, dropout_p), out=y, intermediate=z,
                               inner_activation=inner_activation)
    return y, z


def _inner_width(S: Tensor) -> int:
    return S.shape[-1] * (S.shape[0] if S.dim() == 3 else 1)


def _fake_forward(x: Tensor, U: Tensor, width: int) -> tuple[Tensor, Tensor]:
    return x.new_empty((*x.shape[:-1], U.shape[-1])), x.new_empty((*x.shape[:-1], width))


def _run_backward(grad: Tensor, x: Tensor, S: Tensor, U: Tensor, z: Tensor, bias: Optional[Tensor], activation: str,
                  scale: float, dropout_p: float, seed: Tensor, names: list[str], S_terms=None, U_terms=None,
                  inner_activation: str = "none"):
    return sketchcore.sketched_matmul_backward(
        grad.detach(), x.detach(), S.detach(), U.detach(), z.detach(), bias=None if bias is None else bias.detach(),
        activation=activation, scale=scale, dropout_p=dropout_p, seed=_seed_value(seed, dropout_p), needs=names,
        S_terms=S_terms, U_terms=U_terms, inner_activation=inner_activation)


def _fake_gradients(x: Tensor, shapes, needs: list[bool], has_bias: bool) -> tuple[Tensor, ...]:
    """Fake backward outputs: the gradient's shape where requested (the last one, the
    bias's, only with a bias), else an empty tensor."""
    last = len(shapes) - 1
    return tuple(x.new_empty(shape if wanted and (i < last or has_bias) else (0,))
                 for i, (shape, wanted) in enumerate(zip(shapes, needs)))


def _or_empty(grad: Optional[Tensor], like: Tensor) -> Tensor:
    # Custom operators return tensors only: an empty tensor stands for "not requested".
    return grad if grad is not None else like.new_empty(0)


# --- the general operator: y = dropout(act(scale · Σ_t σ(x S_t) U_t + bias)) -----------------------------
# σ is the optional inner activation (the last argument, "none" by default): CoLA-style
# bottleneck layers. Z, the second output saved for the backward, is its input x·[S_1 … S_T].

_sketched_linear = torch.library.custom_op("sketchcore::sketched_linear", mutates_args=())(_run_forward)


@_sketched_linear.register_fake
def _(x, S, U, bias, activation, scale, dropout_p, seed, inner_activation="none"):
    return _fake_forward(x, U, _inner_width(S))


def sketched_linear_backward(grad: Tensor, x: Tensor, S: Tensor, U: Tensor, z: Tensor, bias: Optional[Tensor],
                             activation: str, scale: float, dropout_p: float, seed: Tensor,
                             needs: list[bool], inner_activation: str = "none") -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The body of ``sketchcore::sketched_linear_backward`` (called directly by _eager)."""
    grads = _gradients(grad, x, S, U, z, bias, activation, scale, dropout_p, seed, needs, inner_activation)
    return tuple(_or_empty(g, x) for g in grads)


def _gradients(grad: Tensor, x: Tensor, S: Tensor, U: Tensor, z: Tensor, bias: Optional[Tensor], activation: str,
               scale: float, dropout_p: float, seed: Tensor, needs: list[bool],
               inner_activation: str = "none") -> tuple[Optional[Tensor], ...]:
    """(dx, dS, dU, dbias), None where not requested."""
    names = [n for n, wanted in zip(("x", "S", "U", "bias"), needs) if wanted and (n != "bias" or bias is not None)]
    return _run_backward(grad, x, S, U, z, bias, activation, scale, dropout_p, seed, names,
                         inner_activation=inner_activation)


_sketched_linear_backward = torch.library.custom_op("sketchcore::sketched_linear_backward",
                                                    mutates_args=())(sketched_linear_backward)


@_sketched_linear_backward.register_fake
def _(grad, x, S, U, z, bias, activation, scale, dropout_p, seed, needs, inner_activation="none"):
    return _fake_gradients(x, (x.shape, S.shape, U.shape, (U.shape[-1],)), needs, bias is not None)


def _setup_context(ctx, inputs, output):
    x, S, U, bias, activation, scale, dropout_p, seed = inputs[:8]
    ctx.save_for_backward(x, S, U, bias, output[1], seed)
    ctx.activation, ctx.scale, ctx.dropout_p = activation, scale, dropout_p
    ctx.inner_activation = inputs[8] if len(inputs) > 8 else "none"
    ctx.non_tensor_inputs = len(inputs) - 4  # activation … seed (and inner_activation): no gradient


def _backward(ctx, grad_y, grad_z, direct: bool = False):
    """The gradients; `direct` calls the backward's body instead of the operator (_eager)."""
    x, S, U, bias, z, seed = ctx.saved_tensors
    needs = list(ctx.needs_input_grad[:4])
    rest = (None,) * ctx.non_tensor_inputs
    if torch.is_grad_enabled():  # the backward is being recorded (create_graph=True): second order
        forward = lambda x, S, U, b: _second_order.composite(  # noqa: E731
            x, S, U, b, ctx.activation, ctx.scale, ctx.dropout_p, seed, ctx.inner_activation)
        return (*_second_order.gradients((x, S, U, bias), needs, grad_y, forward), *rest)
    if direct:
        return (*_gradients(grad_y, x, S, U, z, bias, ctx.activation, ctx.scale, ctx.dropout_p, seed, needs,
                            ctx.inner_activation), *rest)
    dx, dS, dU, db = torch.ops.sketchcore.sketched_linear_backward(grad_y, x, S, U, z, bias, ctx.activation, ctx.scale,
                                                                   ctx.dropout_p, seed, needs, ctx.inner_activation)
    pick = [g if wanted else None for g, wanted in zip((dx, dS, dU, db), needs)]
    return (*pick, *rest)


torch.library.register_autograd("sketchcore::sketched_linear", _backward, setup_context=_setup_context)


# --- Panther's layer: 1/(2T) Σ_t [(x S1_t) U1_t + (x U2_t) S2_t] + b, as the terms of [S1s; U2s], [U1s; S2s] ----

def _joined_in_place(a: Tensor, b: Tensor) -> bool:
    """Whether [a; b] (along dimension 0) is a view: b has a's strides, in a's memory,
    starting where a's index a.shape[0] would be."""
    return (a.dtype == b.dtype and a.device == b.device and a.shape[1:] == b.shape[1:] and a.stride() == b.stride()
            and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
            and b.data_ptr() == a.data_ptr() + a.shape[0] * a.stride(0) * a.element_size())


def _joined(a: Tensor, b: Tensor) -> Tensor:
    """[a; b] along dimension 0: a view, with no copy, when b continues a in memory
    (SKLinear keeps its factors so), else a concatenated copy."""
    if _joined_in_place(a, b):
        return a.detach().as_strided((a.shape[0] + b.shape[0], *a.shape[1:]), a.stride())
    return torch.cat([a.detach(), b.detach()])


def sklinear_forward(x: Tensor, S1s: Tensor, S2s: Tensor, U1s: Tensor, U2s: Tensor, bias: Optional[Tensor],
                     activation: str, dropout_p: float, seed: Tensor) -> tuple[Tensor, Tensor]:
    """The body of ``sketchcore::sklinear`` (called directly by _eager)."""
    scale = 1.0 / (2 * S1s.shape[0])
    return _run_forward(x, _joined(S1s, U2s), _joined(U1s, S2s), bias, activation, scale, dropout_p, seed)


_sklinear = torch.library.custom_op("sketchcore::sklinear", mutates_args=())(sklinear_forward)


@_sklinear.register_fake
def _(x, S1s, S2s, U1s, U2s, bias, activation, dropout_p, seed):
    return _fake_forward(x, S2s, 2 * S1s.shape[0] * S1s.shape[-1])


def _covering(first: bool, second: bool, terms: int) -> tuple[int, int]:
    """The term range of [A; B] (T terms each) that covers the requested halves."""
    return (0 if first else terms, 2 * terms if second else terms)


def sklinear_backward_blocks(grad: Tensor, x: Tensor, S: Tensor, U: Tensor, terms: int, z: Tensor,
                             bias: Optional[Tensor], activation: str, dropout_p: float, seed: Tensor,
                             needs: list[bool]) -> tuple[Optional[Tensor], ...]:
    """SKLinear's gradients (dx, dS1s, dS2s, dU1s, dU2s, dbias) from the packed factors
    S = [S1s; U2s] and U = [U1s; S2s] (T = `terms` each); None where not requested."""
    need_x, need_S1, need_S2, need_U1, need_U2, need_b = needs
    T = terms
    # dS of [S1s; U2s] and dU of [U1s; S2s], only for the terms whose factors need gradients:
    # for SKLinear (U buffers fixed) half of each, a quarter of the backward's FLOPs saved.
    s_range, u_range = _covering(need_S1, need_U2, T), _covering(need_U1, need_S2, T)
    names = [n for n, wanted in (("x", need_x), ("S", need_S1 or need_U2), ("U", need_U1 or need_S2),
                                 ("bias", need_b and bias is not None)) if wanted]
    dx, dS, dU, db = _run_backward(grad, x, S, U, z, bias, activation, 1.0 / (2 * T), dropout_p, seed, names,
                                   S_terms=s_range, U_terms=u_range)
    dS1 = dS[:T] if need_S1 else None
    # Outputs of a custom operator may not share memory: the second half of a shared
    # result is copied (only when both halves are requested, which SKLinear never does).
    dU2 = (dS[-T:].clone() if need_S1 else dS[-T:]) if need_U2 else None
    dU1 = dU[:T] if need_U1 else None
    dS2 = (dU[-T:].clone() if need_U1 else dU[-T:]) if need_S2 else None
    return dx, dS1, dS2, dU1, dU2, db  # dx and db are None unless requested (see names)


def sklinear_backward(grad: Tensor, x: Tensor, S1s: Tensor, S2s: Tensor, U1s: Tensor, U2s: Tensor, z: Tensor,
                      bias: Optional[Tensor], activation: str, dropout_p: float, seed: Tensor,
                      needs: list[bool]) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The body of ``sketchcore::sklinear_backward``."""
    grads = sklinear_backward_blocks(grad, x, _joined(S1s, U2s), _joined(U1s, S2s), S1s.shape[0], z, bias,
                                     activation, dropout_p, seed, needs)
    return tuple(_or_empty(g, x) for g in grads)


_sklinear_backward = torch.library.custom_op("sketchcore::sklinear_backward", mutates_args=())(sklinear_backward)


@_sklinear_backward.register_fake
def _(grad, x, S1s, S2s, U1s, U2s, z, bias, activation, dropout_p, seed, needs):
    return _fake_gradients(x, (x.shape, S1s.shape, S2s.shape, U1s.shape, U2s.shape, (S2s.shape[-1],)), needs,
                           bias is not None)


def _sklinear_setup_context(ctx, inputs, output):
    x, S1s, S2s, U1s, U2s, bias, activation, dropout_p, seed = inputs
    ctx.save_for_backward(x, S1s, S2s, U1s, U2s, bias, output[1], seed)
    ctx.activation, ctx.dropout_p = activation, dropout_p


def _sklinear_backward_rule(ctx, grad_y, grad_z, blocks: Optional[tuple[Tensor, Tensor]] = None):
    """The gradients. `blocks` ([S1s; U2s], [U1s; S2s] joined by the forward): the eager path
    (_eager), which calls the backward's body instead of the operator."""
    x, S1s, S2s, U1s, U2s, bias, z, seed = ctx.saved_tensors
    needs = list(ctx.needs_input_grad[:6])
    if torch.is_grad_enabled():  # second order: Panther's layer as the terms of [S1s; U2s], [U1s; S2s]
        T = S1s.shape[0]
        forward = lambda x, S1, S2, U1, U2, b: _second_order.composite(  # noqa: E731
            x, torch.cat([S1, U2]), torch.cat([U1, S2]), b, ctx.activation, 1.0 / (2 * T), ctx.dropout_p, seed)
        grads = _second_order.gradients((x, S1s, S2s, U1s, U2s, bias), needs, grad_y, forward)
        return (*grads, None, None, None)
    if blocks is not None:
        grads = sklinear_backward_blocks(grad_y, x, *blocks, S1s.shape[0], z, bias, ctx.activation, ctx.dropout_p,
                                         seed, needs)
        return (*grads, None, None, None)
    grads = torch.ops.sketchcore.sklinear_backward(grad_y, x, S1s, S2s, U1s, U2s, z, bias, ctx.activation,
                                                   ctx.dropout_p, seed, needs)
    return (*[g if wanted else None for g, wanted in zip(grads, needs)], None, None, None)


torch.library.register_autograd("sketchcore::sklinear", _sklinear_backward_rule, setup_context=_sklinear_setup_context)


# --- Autocast: the operators follow the autocast dtype of the region (float16 or bfloat16, which
# the CPU computes with float32 accumulation and CUDA natively), as torch's own matmuls do
# (registered through _private), with one exception on the CPU (autocast_plan).

#: Whether this CPU's core computes bfloat16 with its native GEMM (AVX512_BF16); else it widens
#: 16-bit operands to float32 for BLAS. Read once: the core fixes it at its first call.
_CPU_BF16_GEMM: bool = bool(sketchcore.build_info()["cpu_bf16_gemm"])


def _autocast_args(args: tuple, device_type: str, dtype: torch.dtype) -> tuple:
    """`args` with the floating-point tensors on `device_type` cast to `dtype`, except float64
    ones (torch's autocast rule for matmuls); other arguments unchanged."""
    return tuple(a.to(dtype) if isinstance(a, Tensor) and a.is_floating_point() and a.dtype != torch.float64
                 and a.device.type == device_type else a for a in args)


def _widens_on(device_type: str, dtype: torch.dtype) -> bool:
    """Whether the core computes `dtype` on `device_type` from operands widened to float32: on
    the CPU float16 always, bfloat16 where the CPU has no native bfloat16 GEMM."""
    return device_type == "cpu" and not (dtype == torch.bfloat16 and _CPU_BF16_GEMM)


def autocast_plan(args: tuple, device_type: str, dtype: torch.dtype) -> tuple[tuple, Optional[torch.dtype]]:
    """The operands of a forward operator (x first) in an autocast region of `dtype`, and the
    dtype to cast its output to (None: the output already has the operands' dtype).

    The rule is torch's for matmuls (_autocast_args), except where the core would only widen
    the 16-bit operands back to float32 (_widens_on) and x is float32: there rounding x and the
    factors to 16 bits buys no speed, costs a cast of x each way and the 16-bit copy of x that
    the backward keeps, and loses accuracy. The float32 computation runs instead (16-bit
    factors widened) and only its output is rounded to the region's dtype. Measured on a CPU
    without bfloat16 instructions (issue 26): an SKLinear training step under bfloat16
    autocast went from 0.81-0.92x to 0.86-1.00x its float32 step (four interleaved A/B runs),
    level with what the step's own round trip of y to bfloat16 and back costs there.
    """
    x = args[0]
    if (_widens_on(device_type, dtype) and isinstance(x, Tensor) and x.dtype == torch.float32
            and x.device.type == device_type):
        return _autocast_args(args, device_type, torch.float32), dtype
    return _autocast_args(args, device_type, dtype), None


for _name in ("sketched_linear", "sklinear"):
    for _device in ("cpu", "cuda"):
        _private.register_autocast(_name, _device, autocast_plan)

from sketchcore.torch.ops import _functorch  # noqa: E402 - needs the operators above

_functorch.register_batching_rules()
