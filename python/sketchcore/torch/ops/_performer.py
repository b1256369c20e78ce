"""Performer attention as a torch custom operator (``sketchcore::performer_attention`` and its
backward) over the public Python API (:func:`sketchcore.performer_attention`): real kernels,
fake (meta) kernels for ``torch.compile``, and autograd; plus :func:`performer_attention`, the
differentiable function the layer (:class:`~sketchcore.torch.RandMultiHeadAttention`) calls.

The output is allocated as (B, L, H, e) memory seen as (B, H, L, e), so that a layer's
``out.transpose(1, 2).reshape(B, L, H·e)`` is a view, not a copy. Second-order gradients
(``create_graph=True``) run the composite torch formulas of :mod:`sketchcore.torch.layers._attention`.

Plain eager calls (``sketchcore.torch.ops._eager.applies``) skip the dispatcher and torch.library's
autograd wrapper: the same bodies under a plain ``autograd.Function``, or no autograd node at all
where nothing requires gradient (the operator's dispatch costs more than the attention on small
problems: docs/performance_results.md). Tracing, torch.compile, torch.func
and tensor subclasses keep the operator.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

import sketchcore
from sketchcore.torch._common import refuse_legacy_onnx_export
from sketchcore.torch.ops import _eager
from sketchcore.torch.ops._performer_formulas import reference_attention

_KERNELS = ("softmax", "relu")
#: Device types whose fused kernels have not yet passed their tests on a device: there the
#: composite torch formula (made of operations that passed on a GPU) runs unless the gated path
#: cuda_performer_kernels is open (sketchcore.gated_paths()).
_GATED_DEVICES = ("cuda",)


def performer_path(device: torch.device, kernel: str = "softmax", causal: bool = False,
                   dtype: torch.dtype = torch.float32) -> str:
    """What :func:`performer_attention` runs for tensors on `device`: ``"kernels"`` (sketchcore's
    fused kernels) or ``"composite"`` (``sketchcore.torch.ops._performer_formulas.reference_attention``).
    Causal softmax attention below float64 takes the composite formula on a gated device even with
    the gate open: the fused CUDA kernels refuse it (their fixed key constant underflows from head
    dimension 128 on; the CPU kernels' running constant is not in them yet)."""
    if device.type in _GATED_DEVICES:
        if not sketchcore.gated_path_enabled("cuda_performer_kernels"):
            return "composite"
        if causal and kernel == "softmax" and dtype != torch.float64:
            return "composite"
    return "kernels"


def _detached(t: Optional[Tensor]) -> Optional[Tensor]:
    return None if t is None else t.detach()


def _empty_output(q: Tensor, v: Tensor) -> Tensor:
    B, H, L, _ = q.shape
    return q.new_empty((B, L, H, v.shape[-1])).transpose(1, 2)


def performer_forward(q: Tensor, k: Tensor, v: Tensor, features: Tensor, key_weights: Optional[Tensor],
                      value_weights: Optional[Tensor], kernel: str, causal: bool) -> Tensor:
    """The body of ``sketchcore::performer_attention``."""
    out = _empty_output(q, v)
    sketchcore.performer_attention(q.detach(), k.detach(), v.detach(), features.detach(), kernel=kernel,
                                   causal=causal, key_weights=_detached(key_weights),
                                   value_weights=_detached(value_weights), out=out)
    return out


_forward_op = torch.library.custom_op("sketchcore::performer_attention", mutates_args=())(performer_forward)


@_forward_op.register_fake
def _(q, k, v, features, key_weights, value_weights, kernel, causal):
    return _empty_output(q, v)


def performer_backward(grad: Tensor, q: Tensor, k: Tensor, v: Tensor, features: Tensor, out: Tensor,
                       key_weights: Optional[Tensor], value_weights: Optional[Tensor], kernel: str, causal: bool,
                       needs: list[bool]) -> tuple[Tensor, Tensor, Tensor]:
    """The body of ``sketchcore::performer_attention_backward``: (dq, dk, dv), an empty tensor
    for those not in `needs`."""
    names = [n for n, wanted in zip(("q", "k", "v"), needs) if wanted]
    grads = sketchcore.performer_attention_backward(
        grad.detach(), q.detach(), k.detach(), v.detach(), features.detach(), out.detach(), kernel=kernel,
        causal=causal, key_weights=_detached(key_weights), value_weights=_detached(value_weights), needs=names)
    return tuple(g if g is not None else q.new_empty(0) for g in grads)


_backward_op = torch.library.custom_op("sketchcore::performer_attention_backward",
                                       mutates_args=())(performer_backward)


@_backward_op.register_fake
def _(grad, q, k, v, features, out, key_weights, value_weights, kernel, causal, needs):
    return tuple(t.new_empty(t.shape if wanted else (0,)) for t, wanted in zip((q, k, v), needs))


def _setup_context(ctx, inputs, output):
    q, k, v, features, key_weights, value_weights, kernel, causal = inputs
    ctx.save_for_backward(q, k, v, features, key_weights, value_weights, output)
    ctx.kernel, ctx.causal = kernel, causal


def _backward(ctx, grad, direct: bool = False):
    """The gradients; `direct` calls the backward's body instead of the operator (eager path)."""
    q, k, v, features, key_weights, value_weights, out = ctx.saved_tensors
    needs = list(ctx.needs_input_grad[:3])
    if torch.is_grad_enabled():  # the backward is being recorded (create_graph=True): second order
        ref = reference_attention(q, k, v, features, ctx.kernel, ctx.causal, key_weights, value_weights).to(out.dtype)
        wanted = [t for t, w in zip((q, k, v), needs) if w]
        computed = iter(torch.autograd.grad(ref, wanted, grad, create_graph=True))
        grads = [next(computed) if w else None for w in needs]
        return (*grads, None, None, None, None, None)
    backward = performer_backward if direct else torch.ops.sketchcore.performer_attention_backward
    dq, dk, dv = backward(grad, q, k, v, features, out, key_weights, value_weights, ctx.kernel, ctx.causal, needs)
    return (*[g if wanted else None for g, wanted in zip((dq, dk, dv), needs)], None, None, None, None, None)


torch.library.register_autograd("sketchcore::performer_attention", _backward, setup_context=_setup_context)


class _EagerPerformer(torch.autograd.Function):
    """The operator's forward and backward bodies for plain eager calls (see the module docstring)."""

    @staticmethod
    def forward(ctx, q, k, v, features, key_weights, value_weights, kernel, causal):
        out = performer_forward(q, k, v, features, key_weights, value_weights, kernel, causal)
        _setup_context(ctx, (q, k, v, features, key_weights, value_weights, kernel, causal), out)
        return out

    @staticmethod
    def backward(ctx, grad):
        return _backward(ctx, grad, direct=True)


def performer_attention(q: Tensor, k: Tensor, v: Tensor, features: Tensor, *, kernel: str = "softmax",
                        causal: bool = False, key_weights: Optional[Tensor] = None,
                        value_weights: Optional[Tensor] = None) -> Tensor:
    """Differentiable Performer attention on torch tensors (gradients for q, k and v): the
    formulas of :func:`sketchcore.performer_attention`, as the custom operator
    ``torch.ops.sketchcore.performer_attention`` (eager, ``torch.compile`` with
    ``fullgraph=True``, autograd; second order through the composite torch formulas).

    Parameters
    ----------
    q : Tensor, shape (B, H, L, d)
    k : Tensor, shape (B, H, S, d)
    v : Tensor, shape (B, H, S, e)
        One dtype (float16, bfloat16, float32, float64) and device; any strides.
    features : Tensor, shape (m, d)
        The random features; q's dtype or float32.
    kernel : {"softmax", "relu"}
    causal : bool
    key_weights : Tensor, shape (B, S), optional
        0/1 padding mask (or any weights of φ(k_j)); q's dtype or float32.
    value_weights : Tensor, shape (B, H, S), optional
        Multiplies v_j in the numerator (attention dropout of whole keys); q's dtype or float32.

    Returns
    -------
    Tensor, shape (B, H, L, e)
        In q's dtype, (B, L, H, e) in memory. On a CUDA device, while the gated path
        ``cuda_performer_kernels`` is closed (the default until the fused kernels pass on a GPU),
        the composite torch formula computes it instead (compact memory).

    Raises
    ------
    ValueError, TypeError
        As :func:`sketchcore.performer_attention`.

    Examples
    --------
    >>> import torch
    >>> from sketchcore.torch import performer_attention
    >>> q, k, v = (torch.randn(1, 2, 6, 4, requires_grad=True) for _ in range(3))
    >>> out = performer_attention(q, k, v, torch.randn(8, 4), causal=True)
    >>> out.sum().backward()
    >>> out.shape, q.grad.shape
    (torch.Size([1, 2, 6, 4]), torch.Size([1, 2, 6, 4]))
    """
    if kernel not in _KERNELS:
        raise ValueError(f"performer_attention: kernel: expected 'softmax' or 'relu', got {kernel!r}")
    if not isinstance(causal, bool):
        raise TypeError(f"performer_attention: causal: expected a bool, got {type(causal).__name__}")
    if performer_path(q.device, kernel, causal, q.dtype) == "composite":
        return reference_attention(q, k, v, features, kernel, causal, key_weights, value_weights).to(q.dtype)
    if _eager.applies(q, k, v, features, key_weights, value_weights):
        if not (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)):
            return performer_forward(q, k, v, features, key_weights, value_weights, kernel, causal)
        return _EagerPerformer.apply(q, k, v, features, key_weights, value_weights, kernel, causal)
    refuse_legacy_onnx_export("performer_attention")
    return torch.ops.sketchcore.performer_attention(q, k, v, features, key_weights, value_weights, kernel, causal)
