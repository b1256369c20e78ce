"""PyTorch adapters: sketchcore's sketched GEMM as torch custom operators, and
``SKLinear``, a drop-in for Panther's sketched linear layer.

Thin Python over the public API through DLPack (no torch C++ extension). The operators
have fake (meta) implementations and registered autograd, so ``torch.compile(model,
fullgraph=True)`` traces them without graph breaks, and they pass
``torch.library.opcheck``. Under ``torch.autocast`` they compute in float32 on the CPU and
in the region's dtype (float16 or bfloat16) on CUDA devices.
"""
from __future__ import annotations

import fnmatch
import math
import warnings
from typing import Any, Iterable, Optional

import torch
from torch import Tensor, nn

import sketchcore

__all__ = ["SKLinear", "sketch_model", "sketched_linear", "sklinear"]

_ACTIVATIONS = sketchcore.ACTIVATIONS


def _seed_value(seed: Tensor, dropout_p: float) -> Optional[int]:
    return int(seed.item()) if dropout_p > 0 else None


def _run_forward(x: Tensor, S: Tensor, U: Tensor, bias: Optional[Tensor], activation: str, scale: float,
                 dropout_p: float, seed: Tensor) -> tuple[Tensor, Tensor]:
    """y and the saved intermediate Z = x·[S_1 … S_T], allocated by torch, written by the core."""
    y = x.new_empty((*x.shape[:-1], U.shape[-1]))
    z = x.new_empty((*x.shape[:-1], _inner_width(S)))
    sketchcore.sketched_matmul(x.detach(), S.detach(), U.detach(), bias=None if bias is None else bias.detach(),
                               activation=activation, scale=scale, dropout_p=dropout_p,
                               seed=_seed_value(seed, dropout_p), out=y, intermediate=z)
    return y, z


def _inner_width(S: Tensor) -> int:
    return S.shape[-1] * (S.shape[0] if S.dim() == 3 else 1)


def _fake_forward(x: Tensor, U: Tensor, width: int) -> tuple[Tensor, Tensor]:
    return x.new_empty((*x.shape[:-1], U.shape[-1])), x.new_empty((*x.shape[:-1], width))


def _run_backward(grad: Tensor, x: Tensor, S: Tensor, U: Tensor, z: Tensor, bias: Optional[Tensor], activation: str,
                  scale: float, dropout_p: float, seed: Tensor, names: list[str], S_terms=None, U_terms=None):
    return sketchcore.sketched_matmul_backward(
        grad.detach(), x.detach(), S.detach(), U.detach(), z.detach(), bias=None if bias is None else bias.detach(),
        activation=activation, scale=scale, dropout_p=dropout_p, seed=_seed_value(seed, dropout_p), needs=names,
        S_terms=S_terms, U_terms=U_terms)


def _fake_gradients(x: Tensor, shapes, needs: list[bool], has_bias: bool) -> tuple[Tensor, ...]:
    """Fake backward outputs: the gradient's shape where requested (the last one, the
    bias's, only with a bias), else an empty tensor."""
    last = len(shapes) - 1
    return tuple(x.new_empty(shape if wanted and (i < last or has_bias) else (0,))
                 for i, (shape, wanted) in enumerate(zip(shapes, needs)))


def _or_empty(grad: Optional[Tensor], like: Tensor) -> Tensor:
    # Custom operators return tensors only: an empty tensor stands for "not requested".
    return grad if grad is not None else like.new_empty(0)


# --- the general operator: y = dropout(act(scale · Σ_t (x S_t) U_t + bias)) -------------------------------

@torch.library.custom_op("sketchcore::sketched_linear", mutates_args=())
def _sketched_linear(x: Tensor, S: Tensor, U: Tensor, bias: Optional[Tensor], activation: str, scale: float,
                     dropout_p: float, seed: Tensor) -> tuple[Tensor, Tensor]:
    return _run_forward(x, S, U, bias, activation, scale, dropout_p, seed)


@_sketched_linear.register_fake
def _(x, S, U, bias, activation, scale, dropout_p, seed):
    return _fake_forward(x, U, _inner_width(S))


@torch.library.custom_op("sketchcore::sketched_linear_backward", mutates_args=())
def _sketched_linear_backward(grad: Tensor, x: Tensor, S: Tensor, U: Tensor, z: Tensor, bias: Optional[Tensor],
                              activation: str, scale: float, dropout_p: float, seed: Tensor,
                              needs: list[bool]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    names = [n for n, wanted in zip(("x", "S", "U", "bias"), needs) if wanted and (n != "bias" or bias is not None)]
    grads = _run_backward(grad, x, S, U, z, bias, activation, scale, dropout_p, seed, names)
    return tuple(_or_empty(g, x) for g in grads)


@_sketched_linear_backward.register_fake
def _(grad, x, S, U, z, bias, activation, scale, dropout_p, seed, needs):
    return _fake_gradients(x, (x.shape, S.shape, U.shape, (U.shape[-1],)), needs, bias is not None)


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


@torch.library.custom_op("sketchcore::sklinear", mutates_args=())
def _sklinear(x: Tensor, S1s: Tensor, S2s: Tensor, U1s: Tensor, U2s: Tensor, bias: Optional[Tensor],
              activation: str, dropout_p: float, seed: Tensor) -> tuple[Tensor, Tensor]:
    scale = 1.0 / (2 * S1s.shape[0])
    return _run_forward(x, _joined(S1s, U2s), _joined(U1s, S2s), bias, activation, scale, dropout_p, seed)


@_sklinear.register_fake
def _(x, S1s, S2s, U1s, U2s, bias, activation, dropout_p, seed):
    return _fake_forward(x, S2s, 2 * S1s.shape[0] * S1s.shape[-1])


def _covering(first: bool, second: bool, terms: int) -> tuple[int, int]:
    """The term range of [A; B] (T terms each) that covers the requested halves."""
    return (0 if first else terms, 2 * terms if second else terms)


@torch.library.custom_op("sketchcore::sklinear_backward", mutates_args=())
def _sklinear_backward(grad: Tensor, x: Tensor, S1s: Tensor, S2s: Tensor, U1s: Tensor, U2s: Tensor, z: Tensor,
                       bias: Optional[Tensor], activation: str, dropout_p: float, seed: Tensor,
                       needs: list[bool]) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    need_x, need_S1, need_S2, need_U1, need_U2, need_b = needs
    T = S1s.shape[0]
    # dS of [S1s; U2s] and dU of [U1s; S2s], only for the terms whose factors need gradients:
    # for SKLinear (U buffers fixed) half of each, a quarter of the backward's FLOPs saved.
    s_range, u_range = _covering(need_S1, need_U2, T), _covering(need_U1, need_S2, T)
    names = [n for n, wanted in (("x", need_x), ("S", need_S1 or need_U2), ("U", need_U1 or need_S2),
                                 ("bias", need_b and bias is not None)) if wanted]
    dx, dS, dU, db = _run_backward(grad, x, _joined(S1s, U2s), _joined(U1s, S2s), z, bias, activation, 1.0 / (2 * T),
                                   dropout_p, seed, names, S_terms=s_range, U_terms=u_range)
    dS1 = dS[:T] if need_S1 else None
    # Outputs of a custom operator may not share memory: the second half of a shared
    # result is copied (only when both halves are requested, which SKLinear never does).
    dU2 = (dS[-T:].clone() if need_S1 else dS[-T:]) if need_U2 else None
    dU1 = dU[:T] if need_U1 else None
    dS2 = (dU[-T:].clone() if need_U1 else dU[-T:]) if need_S2 else None
    return tuple(_or_empty(g, x) for g in (dx, dS1, dS2, dU1, dU2, db))


@_sklinear_backward.register_fake
def _(grad, x, S1s, S2s, U1s, U2s, z, bias, activation, dropout_p, seed, needs):
    return _fake_gradients(x, (x.shape, S1s.shape, S2s.shape, U1s.shape, U2s.shape, (S2s.shape[-1],)), needs,
                           bias is not None)


def _sklinear_setup_context(ctx, inputs, output):
    x, S1s, S2s, U1s, U2s, bias, activation, dropout_p, seed = inputs
    ctx.save_for_backward(x, S1s, S2s, U1s, U2s, bias, output[1], seed)
    ctx.activation, ctx.dropout_p = activation, dropout_p


def _sklinear_backward_rule(ctx, grad_y, grad_z):
    x, S1s, S2s, U1s, U2s, bias, z, seed = ctx.saved_tensors
    needs = list(ctx.needs_input_grad[:6])
    grads = torch.ops.sketchcore.sklinear_backward(grad_y, x, S1s, S2s, U1s, U2s, z, bias, ctx.activation,
                                                   ctx.dropout_p, seed, needs)
    return (*[g if wanted else None for g, wanted in zip(grads, needs)], None, None, None)


torch.library.register_autograd("sketchcore::sklinear", _sklinear_backward_rule, setup_context=_sklinear_setup_context)
torch.library.register_autocast("sketchcore::sklinear", "cpu", torch.float32)


# --- CUDA autocast: the device computes in float16/bfloat16 natively, so the operators follow
# the autocast dtype of the region, as torch's own matmuls do (torch.library.register_autocast
# would fix one dtype at registration). ------------------------------------------------------

_AUTOCAST_LIBRARY = torch.library.Library("sketchcore", "IMPL")


def _autocast_args(args: tuple, device_type: str, dtype: torch.dtype) -> tuple:
    """`args` with the floating-point tensors on `device_type` cast to `dtype`, except float64
    ones (torch's autocast rule for matmuls); other arguments unchanged."""
    return tuple(a.to(dtype) if isinstance(a, Tensor) and a.is_floating_point() and a.dtype != torch.float64
                 and a.device.type == device_type else a for a in args)


def _register_cuda_autocast(name: str) -> None:
    overload = getattr(torch.ops.sketchcore, name).default
    key = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCUDA)

    def kernel(_keyset, *args):
        with torch._C._ExcludeDispatchKeyGuard(key):
            return overload(*_autocast_args(args, "cuda", torch.get_autocast_dtype("cuda")))

    _AUTOCAST_LIBRARY.impl(name, kernel, "AutocastCUDA", with_keyset=True)


_register_cuda_autocast("sketched_linear")
_register_cuda_autocast("sklinear")


def _checked_activation(activation: str, where: str) -> str:
    if activation not in _ACTIVATIONS:
        raise ValueError(f"{where}: activation: expected one of {_ACTIVATIONS}, got {activation!r}")
    return activation


def _dropout_seed(seed: Optional[Tensor], dropout_p: float) -> Tensor:
    """A 0-d int64 seed tensor; drawn from torch's RNG when dropout is on and none is given."""
    if seed is not None:
        return seed
    if dropout_p > 0:
        return torch.randint(0, 2**62, (), dtype=torch.int64)
    return torch.zeros((), dtype=torch.int64)


def sklinear(x: Tensor, S1s: Tensor, S2s: Tensor, U1s: Tensor, U2s: Tensor, bias: Optional[Tensor] = None, *,
             activation: str = "none", dropout_p: float = 0.0, seed: Optional[Tensor] = None) -> Tensor:
    """Differentiable Panther layer ``dropout(act(1/(2T) Σ_t [(x S1_t) U1_t + (x U2_t) S2_t] + bias))``.

    S1s (T, in, k), S2s (T, k, out), U1s (T, k, out), U2s (T, in, k). The 2T products run
    as the terms of one packed call over ``[S1s; U2s]`` and ``[U1s; S2s]``; when U2s
    directly follows S1s in memory (and S2s follows U1s), as in :class:`SKLinear`, these
    are views and nothing is copied. Gradients are computed only for the factors that
    require them. ``seed`` as in :func:`sketched_linear`.
    """
    _checked_activation(activation, "sklinear")
    shapes = {"S1s": S1s.shape, "S2s": S2s.shape, "U1s": U1s.shape, "U2s": U2s.shape}
    for name, shape in shapes.items():
        if len(shape) != 3 or shape[0] != S1s.shape[0]:
            raise ValueError(f"sklinear: {name}: expected a 3-D tensor (T = {S1s.shape[0]}, ., .) like S1s, "
                             f"got shape {tuple(shape)}")
    if U2s.shape != S1s.shape or U1s.shape != S2s.shape:
        raise ValueError(f"sklinear: expected U2s shaped like S1s {tuple(S1s.shape)} and U1s like S2s "
                         f"{tuple(S2s.shape)}, got {tuple(U2s.shape)} and {tuple(U1s.shape)}")
    y, _ = torch.ops.sketchcore.sklinear(x, S1s, S2s, U1s, U2s, bias, activation, float(dropout_p),
                                         _dropout_seed(seed, dropout_p))
    return y


def sketched_linear(x: Tensor, S: Tensor, U: Tensor, bias: Optional[Tensor] = None, *, activation: str = "none",
                    scale: float = 1.0, dropout_p: float = 0.0, seed: Optional[Tensor] = None) -> Tensor:
    """Differentiable ``dropout(activation(scale * sum_t (x @ S[t]) @ U[t] + bias))``.

    ``seed`` is a 0-d int64 tensor (drawn with ``torch.randint`` when ``None``, so that it
    follows ``torch.manual_seed``); the backward regenerates the dropout mask from it.
    """
    _checked_activation(activation, "sketched_linear")
    y, _ = torch.ops.sketchcore.sketched_linear(x, S, U, bias, activation, float(scale), float(dropout_p),
                                                _dropout_seed(seed, dropout_p))
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
        self._pack_factors()
        if bias:
            bound = 1 / math.sqrt(n_in)
            self.bias = nn.Parameter(torch.empty(n_out, **kwargs).uniform_(-bound, bound))
        else:
            self.register_parameter("bias", None)

    @classmethod
    def from_linear(cls, linear: nn.Linear, num_terms: int, low_rank: int, **kwargs: Any) -> "SKLinear":
        """An SKLinear initialised from ``linear``'s weight and bias."""
        layer = cls(linear.in_features, linear.out_features, num_terms, low_rank, W_init=linear.weight.detach(),
                    bias=linear.bias is not None, dtype=linear.weight.dtype, device=linear.weight.device, **kwargs)
        if linear.bias is not None:
            with torch.no_grad():
                layer.bias.copy_(linear.bias)
        return layer

    def _pack_factors(self) -> None:
        """Stores [S1s; U2s] and [U1s; S2s] each in one block of memory (the parameters and
        buffers become views into it), so that forward hands the core two views and copies
        nothing. The first block is laid out (in, 2T, k): the core reads it in place as the
        packed in × 2Tk matrix [S1_1 … S1_T U2_1 … U2_T], so S1s and U2s are non-contiguous
        views. Called at construction and after every ``.to()``/``.double()``/...; where
        something else breaks the layout (``load_state_dict(assign=True)``), forward still
        works, with one concatenation per call."""
        T = self.num_terms
        with torch.no_grad():
            S = torch.cat([self.S1s, self.U2s]).transpose(0, 1).contiguous().transpose(0, 1)  # (2T, in, k) over (in, 2T, k)
            U = torch.cat([self.U1s, self.S2s])
        self.S1s.data, self._buffers["U2s"] = S[:T], S[T:]
        self._buffers["U1s"], self.S2s.data = U[:T], U[T:]

    def _apply(self, fn, *args, **kwargs):
        result = super()._apply(fn, *args, **kwargs)
        if _joined_in_place(self.S1s, self.U2s) and _joined_in_place(self.U1s, self.S2s):
            return result  # in-place moves such as share_memory_() keep the layout
        self._pack_factors()
        return result

    def forward(self, x: Tensor) -> Tensor:
        p = self.dropout if self.training else 0.0
        return sklinear(x, self.S1s, self.S2s, self.U1s, self.U2s, self.bias, activation=self.activation,
                        dropout_p=p)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, num_terms={self.num_terms}, "
                f"low_rank={self.low_rank}, bias={self.bias is not None}, activation={self.activation!r}")


def sketch_model(model: nn.Module, num_terms: int, low_rank: int, *, include: Optional[Iterable[str]] = None,
                 exclude: Optional[Iterable[str]] = None, **kwargs: Any) -> dict[str, nn.Linear]:
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
