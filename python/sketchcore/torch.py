"""PyTorch adapters: sketchcore's sketched GEMM as torch custom operators, and
``SKLinear``, a drop-in for Panther's sketched linear layer.

Thin Python over the public API through DLPack (no torch C++ extension). The operators
have fake (meta) implementations and registered autograd, so ``torch.compile(model,
fullgraph=True)`` traces them without graph breaks, and they pass
``torch.library.opcheck``. Under ``torch.autocast`` on the CPU they compute in float32.
"""
from __future__ import annotations

import fnmatch
import math
import warnings
from typing import Iterable, Optional

import torch
from torch import Tensor, nn

import sketchcore

__all__ = ["SKLinear", "sketch_model", "sketched_linear"]

_ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu")


def _seed_value(seed: Tensor, dropout_p: float) -> Optional[int]:
    return int(seed.item()) if dropout_p > 0 else None


@torch.library.custom_op("sketchcore::sketched_linear", mutates_args=())
def _sketched_linear(x: Tensor, S: Tensor, U: Tensor, bias: Optional[Tensor], activation: str, scale: float,
                     dropout_p: float, seed: Tensor) -> tuple[Tensor, Tensor]:
    r = S.shape[-1] * (S.shape[0] if S.dim() == 3 else 1)
    y = x.new_empty((*x.shape[:-1], U.shape[-1]))
    z = x.new_empty((*x.shape[:-1], r))
    sketchcore.sketched_matmul(x.detach(), S.detach(), U.detach(), bias=None if bias is None else bias.detach(),
                               activation=activation, scale=scale, dropout_p=dropout_p,
                               seed=_seed_value(seed, dropout_p), out=y, intermediate=z)
    return y, z


@_sketched_linear.register_fake
def _(x, S, U, bias, activation, scale, dropout_p, seed):
    r = S.shape[-1] * (S.shape[0] if S.dim() == 3 else 1)
    return x.new_empty((*x.shape[:-1], U.shape[-1])), x.new_empty((*x.shape[:-1], r))


@torch.library.custom_op("sketchcore::sketched_linear_backward", mutates_args=())
def _sketched_linear_backward(grad: Tensor, x: Tensor, S: Tensor, U: Tensor, z: Tensor, bias: Optional[Tensor],
                              activation: str, scale: float, dropout_p: float, seed: Tensor,
                              needs: list[bool]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    names = [n for n, wanted in zip(("x", "S", "U", "bias"), needs) if wanted and (n != "bias" or bias is not None)]
    grads = sketchcore.sketched_matmul_backward(
        grad.detach(), x.detach(), S.detach(), U.detach(), z.detach(), bias=None if bias is None else bias.detach(),
        activation=activation, scale=scale, dropout_p=dropout_p, seed=_seed_value(seed, dropout_p), needs=names)
    # Custom operators return tensors only: an empty tensor stands for "not requested".
    return tuple(g if g is not None else x.new_empty(0) for g in grads)


@_sketched_linear_backward.register_fake
def _(grad, x, S, U, z, bias, activation, scale, dropout_p, seed, needs):
    shapes = (x.shape, S.shape, U.shape, (U.shape[-1],))
    has = (True, True, True, bias is not None)
    return tuple(x.new_empty(shape if wanted and ok else (0,)) for shape, wanted, ok in zip(shapes, needs, has))


def _setup_context(ctx, inputs, output):
    x, S, U, bias, activation, scale, dropout_p, seed = inputs
    ctx.save_for_backward(x, S, U, bias, output[1], seed)
    ctx.activation, ctx.scale, ctx.dropout_p = activation, scale, dropout_p


def _backward(ctx, grad_y, grad_z):
    x, S, U, bias, z, seed = ctx.saved_tensors
    needs = list(ctx.needs_input_grad[:4])
    dx, dS, dU, db = torch.ops.sketchcore.sketched_linear_backward(
        grad_y, x, S, U, z, bias, ctx.activation, ctx.scale, ctx.dropout_p, seed, needs)
    pick = [g if wanted else None for g, wanted in zip((dx, dS, dU, db), needs)]
    return (*pick, None, None, None, None)


torch.library.register_autograd("sketchcore::sketched_linear", _backward, setup_context=_setup_context)
torch.library.register_autocast("sketchcore::sketched_linear", "cpu", torch.float32)


def sketched_linear(x: Tensor, S: Tensor, U: Tensor, bias: Optional[Tensor] = None, *, activation: str = "none",
                    scale: float = 1.0, dropout_p: float = 0.0, seed: Optional[Tensor] = None) -> Tensor:
    """Differentiable ``dropout(activation(scale * sum_t (x @ S[t]) @ U[t] + bias))``.

    ``seed`` is a 0-d int64 tensor (drawn with ``torch.randint`` when ``None``, so that it
    follows ``torch.manual_seed``); the backward regenerates the dropout mask from it.
    """
    if activation not in _ACTIVATIONS:
        raise ValueError(f"sketched_linear: activation: expected one of {_ACTIVATIONS}, got {activation!r}")
    if seed is None:
        seed = torch.randint(0, 2**62, (), dtype=torch.int64) if dropout_p > 0 else torch.zeros((), dtype=torch.int64)
    y, _ = torch.ops.sketchcore.sketched_linear(x, S, U, bias, activation, float(scale), float(dropout_p), seed)
    return y


def _positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"SKLinear: {name}: expected an integer ≥ 1, got {value!r}")
    return value


class SKLinear(nn.Module):
    """A sketched linear layer with Panther's ``SKLinear`` math, initialisation and names:

        y = 1/(2T) · Σ_t [(x S1_t) U1_t + (x U2_t) S2_t] + b

    with learnable ``S1s`` (T, in, k), ``S2s`` (T, k, out) and ``bias``, and fixed buffers
    ``U1s`` (T, k, out), ``U2s`` (T, in, k) with entries ±1/√k (drawn with torch's RNG).
    Initialised from a dense weight W (``W_init``, shape (out, in) as in ``nn.Linear``):
    ``S1_t = Wᵀ U1_tᵀ``, ``S2_t = U2_tᵀ Wᵀ``. Without ``W_init``, W is drawn like
    ``nn.Linear``'s weight with fan-in = in_features; Panther computes this fan-in on the
    wrong axis (out_features), which sketchcore does not reproduce.

    All 2T products run as one packed pair of GEMMs with fused bias, activation and
    dropout; inputs may have any leading shape and any strides (Panther's ``.view`` fails
    on non-contiguous inputs). A warning is issued when the layer has more learnable
    parameters than the dense layer it replaces.
    """

    def __init__(self, in_features: int, out_features: int, num_terms: int, low_rank: int,
                 W_init: Optional[Tensor] = None, bias: bool = True, activation: Optional[str] = None,
                 dropout: float = 0.0, dtype=None, device=None):
        super().__init__()
        self.in_features = _positive_int(in_features, "in_features")
        self.out_features = _positive_int(out_features, "out_features")
        self.num_terms = _positive_int(num_terms, "num_terms")
        self.low_rank = _positive_int(low_rank, "low_rank")
        self.activation = activation or "none"
        if self.activation not in _ACTIVATIONS:
            raise ValueError(f"SKLinear: activation: expected one of {_ACTIVATIONS} or None, got {activation!r}")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"SKLinear: dropout: expected a probability in [0, 1], got {dropout!r}")
        self.dropout = float(dropout)
        kwargs = {"dtype": dtype or torch.get_default_dtype(), "device": device}
        T, k, n_in, n_out = self.num_terms, self.low_rank, self.in_features, self.out_features
        if T * k * (n_in + n_out) > n_in * n_out:
            warnings.warn(f"SKLinear({n_in}, {n_out}, num_terms={T}, low_rank={k}) has {T * k * (n_in + n_out)} "
                          f"learnable parameters, more than the dense layer's {n_in * n_out}", stacklevel=2)
        if W_init is None:
            W_init = torch.empty(n_out, n_in, **kwargs)
            nn.init.kaiming_uniform_(W_init, a=math.sqrt(5))  # nn.Linear's init; fan-in = in_features
        elif tuple(W_init.shape) != (n_out, n_in):
            raise ValueError(f"SKLinear: W_init: expected shape ({n_out}, {n_in}) (out_features, in_features), "
                             f"got {tuple(W_init.shape)}")
        sign = 1.0 / math.sqrt(k)
        self.register_buffer("U1s", (torch.randint(0, 2, (T, k, n_out), device=device) * 2 - 1).to(kwargs["dtype"]) * sign)
        self.register_buffer("U2s", (torch.randint(0, 2, (T, n_in, k), device=device) * 2 - 1).to(kwargs["dtype"]) * sign)
        W = W_init.detach().to(**kwargs).t()  # (in, out)
        self.S1s = nn.Parameter(torch.stack([W @ self.U1s[t].t() for t in range(T)]))
        self.S2s = nn.Parameter(torch.stack([self.U2s[t].t() @ W for t in range(T)]))
        if bias:
            bound = 1 / math.sqrt(n_in)
            self.bias = nn.Parameter(torch.empty(n_out, **kwargs).uniform_(-bound, bound))
        else:
            self.register_parameter("bias", None)

    @classmethod
    def from_linear(cls, linear: nn.Linear, num_terms: int, low_rank: int, **kwargs) -> "SKLinear":
        """An SKLinear initialised from ``linear``'s weight and bias."""
        layer = cls(linear.in_features, linear.out_features, num_terms, low_rank, W_init=linear.weight.detach(),
                    bias=linear.bias is not None, dtype=linear.weight.dtype, device=linear.weight.device, **kwargs)
        if linear.bias is not None:
            with torch.no_grad():
                layer.bias.copy_(linear.bias)
        return layer

    def forward(self, x: Tensor) -> Tensor:
        S = torch.cat([self.S1s, self.U2s], dim=0)  # (2T, in, k): terms (x S1_t) and (x U2_t)
        U = torch.cat([self.U1s, self.S2s], dim=0)  # (2T, k, out): times U1_t and S2_t
        p = self.dropout if self.training else 0.0
        return sketched_linear(x, S, U, self.bias, activation=self.activation, scale=1.0 / (2 * self.num_terms),
                               dropout_p=p)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, num_terms={self.num_terms}, "
                f"low_rank={self.low_rank}, bias={self.bias is not None}, activation={self.activation!r}")


def sketch_model(model: nn.Module, num_terms: int, low_rank: int, *, include: Optional[Iterable[str]] = None,
                 exclude: Optional[Iterable[str]] = None, **kwargs) -> dict[str, nn.Linear]:
    """Replaces, in place, every ``nn.Linear`` of ``model`` whose qualified name matches a
    pattern of ``include`` (all when None) and none of ``exclude`` (fnmatch patterns) by
    ``SKLinear.from_linear``; returns the replaced layers by name."""
    include = list(include) if include is not None else None
    exclude = list(exclude or ())
    replaced = {}
    for name, module in list(model.named_modules()):
        if type(module) is not nn.Linear:
            continue
        if include is not None and not any(fnmatch.fnmatchcase(name, p) for p in include):
            continue
        if any(fnmatch.fnmatchcase(name, p) for p in exclude):
            continue
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, SKLinear.from_linear(module, num_terms, low_rank, **kwargs))
        replaced[name] = module
    return replaced
