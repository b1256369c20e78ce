"""Differentiable functions over the custom operators: ``sketched_linear`` and Panther's
layer as ``sklinear``, and the one road from a call to the kernel that they and the layers take
(``run_sketched_linear``, ``run_sklinear``: arguments already checked): the composite torch formula
where a CUDA inner activation is gated, the eager fast path (``_eager``: no dispatcher), the
``torch.func`` path under transforms, and otherwise the custom operator (``torch.compile``,
``torch.export``, tracing, meta tensors, autocast regions the fast path does not take)."""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

import sketchcore

from sketchcore.torch._common import checked_activation, refuse_legacy_onnx_export
from sketchcore.torch.ops import _eager, _functorch, _ops  # noqa: F401 - _ops registers the operators


#: Device types whose inner-activation kernels have not yet passed their tests on a device: there a
#: call with an inner activation runs the composite torch formula unless the gated path
#: cuda_inner_activation is open (sketchcore.gated_paths()).
_GATED_DEVICES = ("cuda",)


def takes_composite(x: Tensor, inner_activation: str) -> bool:
    """Whether a call with this inner activation on x's device runs the composite torch formula
    (matmul, σ, matmul) instead of sketchcore's kernels: CUDA tensors while ``cuda_inner_activation``
    is closed."""
    return (inner_activation != "none" and x.device.type in _GATED_DEVICES
            and not sketchcore.gated_path_enabled("cuda_inner_activation"))


def _dropout_seed(seed: Optional[Tensor], dropout_p: float) -> Tensor:
    """A 0-d int64 seed tensor; drawn from torch's RNG when dropout is on and none is given."""
    if seed is not None:
        return seed
    if dropout_p > 0:
        return torch.randint(0, 4611686018427387904, [1], dtype=torch.int64).reshape([])  # 2**62 (an int in TorchScript)
    return torch.zeros([], dtype=torch.int64)


def _eager_seed(seed: Optional[Tensor], dropout_p: float) -> Tensor:
    """_dropout_seed for the eager path: without dropout, one shared seed tensor (a 2 µs
    allocation per call saved)."""
    return _eager.NO_SEED if seed is None and dropout_p == 0 else _dropout_seed(seed, dropout_p)


def sklinear(x: Tensor, S1s: Tensor, S2s: Tensor, U1s: Tensor, U2s: Tensor, bias: Optional[Tensor] = None, *,
             activation: str = "none", dropout_p: float = 0.0, seed: Optional[Tensor] = None) -> Tensor:
    """Differentiable Panther layer ``dropout(act(1/(2T) Σ_t [(x S1_t) U1_t + (x U2_t) S2_t] + bias))``.

    S1s (T, in, k), S2s (T, k, out), U1s (T, k, out), U2s (T, in, k). The 2T products run
    as the terms of one packed call over ``[S1s; U2s]`` and ``[U1s; S2s]``; when U2s
    directly follows S1s in memory (and S2s follows U1s), as in :class:`SKLinear`, these
    are views and nothing is copied. Gradients are computed only for the factors that
    require them. ``seed`` as in :func:`sketched_linear`.

    Parameters
    ----------
    x : Tensor, shape (..., in)
    S1s, U2s : Tensor, shape (T, in, k)
    S2s, U1s : Tensor, shape (T, k, out)
    bias : Tensor, shape (out,), optional
    activation : {"none", "relu", "gelu", "gelu_tanh", "silu"}
    dropout_p : float
        Inverted-dropout probability in [0, 1].
    seed : Tensor, optional
        0-d int64 dropout seed.

    Returns
    -------
    Tensor, shape (..., out)

    Raises
    ------
    ValueError
        An unknown activation; a factor that is not 3-D or has another T than S1s; U2s not
        shaped like S1s or U1s not like S2s; anything :func:`sketched_linear` refuses.
    TypeError
        As :func:`sketchcore.sketched_matmul` (dtypes, devices).

    Examples
    --------
    >>> x = torch.ones(2, 3)
    >>> S1s, U2s = torch.ones(2, 3, 2), torch.ones(2, 3, 2)
    >>> S2s, U1s = torch.ones(2, 2, 4), torch.ones(2, 2, 4)
    >>> sklinear(x, S1s, S2s, U1s, U2s)
    tensor([[6., 6., 6., 6.],
            [6., 6., 6., 6.]])
    >>> sklinear(x, S1s, S2s, U1s, torch.ones(2, 3, 3))
    Traceback (most recent call last):
    ValueError: sklinear: expected U2s shaped like S1s (2, 3, 2) and U1s like S2s (2, 2, 4), got (2, 3, 3) and (2, 2, 4)
    """
    checked_activation(activation, "sklinear")
    shapes = {"S1s": S1s.shape, "S2s": S2s.shape, "U1s": U1s.shape, "U2s": U2s.shape}
    for name, shape in shapes.items():
        if len(shape) != 3 or shape[0] != S1s.shape[0]:
            raise ValueError(f"sklinear: {name}: expected a 3-D tensor (T = {S1s.shape[0]}, ., .) like S1s, "
                             f"got shape {tuple(shape)}")
    if U2s.shape != S1s.shape or U1s.shape != S2s.shape:
        raise ValueError(f"sklinear: expected U2s shaped like S1s {tuple(S1s.shape)} and U1s like S2s "
                         f"{tuple(S2s.shape)}, got {tuple(U2s.shape)} and {tuple(U1s.shape)}")
    return run_sklinear(x, S1s, S2s, U1s, U2s, bias, activation, float(dropout_p), seed)


def run_sklinear(x: Tensor, S1s: Tensor, S2s: Tensor, U1s: Tensor, U2s: Tensor, bias: Optional[Tensor],
                 activation: str, dropout_p: float, seed: Optional[Tensor]) -> Tensor:
    """:func:`sklinear` on checked arguments, through the road that fits the call (see the module)."""
    if _eager.applies(x, S1s, S2s, U1s, U2s, bias):
        return _eager.sklinear(x, S1s, S2s, U1s, U2s, bias, activation, dropout_p, _eager_seed(seed, dropout_p))
    if _functorch.transforms_active():  # torch.func: the packed factors as one differentiable call
        return _functorch.SketchedLinearFunction.apply(x, torch.cat([S1s, U2s]), torch.cat([U1s, S2s]), bias,
                                                       activation, 1.0 / (2 * S1s.shape[0]), dropout_p,
                                                       _dropout_seed(seed, dropout_p))
    refuse_legacy_onnx_export("sklinear")
    y, _ = torch.ops.sketchcore.sklinear(x, S1s, S2s, U1s, U2s, bias, activation, dropout_p,
                                         _dropout_seed(seed, dropout_p))
    return y


def sketched_linear(x: Tensor, S: Tensor, U: Tensor, bias: Optional[Tensor] = None, *, activation: str = "none",
                    scale: float = 1.0, dropout_p: float = 0.0, seed: Optional[Tensor] = None,
                    inner_activation: str = "none") -> Tensor:
    """Differentiable ``dropout(activation(scale * sum_t σ(x @ S[t]) @ U[t] + bias))``.

    σ is ``inner_activation`` (a CoLA-style bottleneck activation on the rank-wide
    intermediate; identity by default). The backward keeps only the intermediate's input
    x @ S and recomputes σ and σ' from it.

    ``seed`` is a 0-d int64 tensor (drawn with ``torch.randint`` when ``None``, so that it
    follows ``torch.manual_seed``); the backward regenerates the dropout mask from it.

    Parameters
    ----------
    x : Tensor, shape (..., d_in)
    S : Tensor, shape (d_in, k) or (T, d_in, k)
    U : Tensor, shape (k, d_out) or (T, k, d_out)
    bias : Tensor, shape (d_out,), optional
    activation : {"none", "relu", "gelu", "gelu_tanh", "silu"}
    scale : float
        Multiplies the product.
    dropout_p : float
        Inverted-dropout probability in [0, 1].
    seed : Tensor, optional
        0-d int64 dropout seed.
    inner_activation : {"none", "relu", "gelu", "gelu_tanh", "silu"}
        σ on the (..., T·k) intermediate.

    Returns
    -------
    Tensor, shape (..., d_out)
        Differentiable with respect to x, S, U and bias.

    Raises
    ------
    ValueError
        An unknown activation or inner activation; shapes, scale, dropout_p or seed as
        :func:`sketchcore.sketched_matmul` refuses them.
    TypeError
        As :func:`sketchcore.sketched_matmul` (dtypes, devices).

    Examples
    --------
    >>> x, U = torch.ones(2, 3), torch.ones(2, 4)
    >>> S = torch.ones(3, 2, requires_grad=True)
    >>> y = sketched_linear(x, S, U, scale=0.5)
    >>> y.detach()
    tensor([[3., 3., 3., 3.],
            [3., 3., 3., 3.]])
    >>> y.sum().backward(); S.grad
    tensor([[4., 4.],
            [4., 4.],
            [4., 4.]])
    >>> sketched_linear(x, S, U, activation="tanh")
    Traceback (most recent call last):
    ValueError: sketched_linear: activation: expected one of ('none', 'relu', 'gelu', 'gelu_tanh', 'silu'), got 'tanh'
    """
    checked_activation(activation, "sketched_linear")
    checked_activation(inner_activation, "sketched_linear", "inner_activation")
    return run_sketched_linear(x, S, U, bias, activation, float(scale), float(dropout_p), seed, inner_activation)


def run_sketched_linear(x: Tensor, S: Tensor, U: Tensor, bias: Optional[Tensor], activation: str, scale: float,
                        dropout_p: float, seed: Optional[Tensor], inner_activation: str) -> Tensor:
    """:func:`sketched_linear` on checked arguments, through the road that fits the call (see the module)."""
    if takes_composite(x, inner_activation):
        from sketchcore.torch.ops._second_order import composite
        return composite(x, S, U, bias, activation, scale, dropout_p, _dropout_seed(seed, dropout_p),
                         inner_activation)
    if _eager.applies(x, S, U, bias):
        return _eager.sketched_linear(x, S, U, bias, activation, scale, dropout_p, _eager_seed(seed, dropout_p),
                                      inner_activation)
    if _functorch.transforms_active():  # torch.func.grad/vjp/jacrev/vmap (see _functorch)
        return _functorch.SketchedLinearFunction.apply(x, S, U, bias, activation, scale, dropout_p,
                                                       _dropout_seed(seed, dropout_p), inner_activation)
    refuse_legacy_onnx_export("sketched_linear")
    y, _ = torch.ops.sketchcore.sketched_linear(x, S, U, bias, activation, scale, dropout_p,
                                                _dropout_seed(seed, dropout_p), inner_activation)
    return y
