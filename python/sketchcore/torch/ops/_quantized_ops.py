"""sketchcore's int8 inference GEMMs as torch custom operators, ``sketchcore::int8_sketched_linear``
and ``sketchcore::int8_linear``, with fake kernels (``torch.export``, ``torch.compile``) and an
autograd rule that refuses to differentiate; and the functions the int8 layers call, which take
the operators only where torch traces (eager calls go straight to the binding, as fast as before).

The operators take the int8 codes and float32 scales as tensors (a packed ``sketchcore.Int8Factor``
cannot cross an operator's boundary); both roads pack them through one cache keyed on the tensors
themselves (identity, checked through weak references, and version counters), so a layer's factors
are packed once and again only after a buffer is replaced or written. Importing this module
registers the operators."""
from __future__ import annotations

import threading
import weakref
from typing import Any, Optional, cast

import torch
from torch import Tensor

import sketchcore
from sketchcore.torch.ops import _functorch

__all__ = ["int8_linear", "int8_sketched_linear", "packed_int8"]

_PLAIN = (torch.Tensor, torch.nn.Parameter)
_is_compiling = torch.compiler.is_compiling
_is_exporting = torch.compiler.is_exporting
_is_grad_enabled = torch.is_grad_enabled
_is_tracing: Any = torch.jit.is_tracing  # type: ignore[attr-defined]


# --- packing, once per set of factors ------------------------------------------------------------

class _Packed:
    """Packed factors and what they were packed from: weak references to the codes and scales
    (the entry dies with the first codes) and their version counters (None: an inference
    tensor, which counts no versions, so the factors are packed on every call)."""

    __slots__ = ("refs", "versions", "factors")

    def __init__(self, tensors: tuple[Tensor, ...], versions: Optional[tuple[int, ...]], factors: tuple[Any, ...]):
        self.refs = tuple(weakref.ref(t) for t in tensors)
        self.versions, self.factors = versions, factors

    def matches(self, tensors: tuple[Tensor, ...], versions: Optional[tuple[int, ...]]) -> bool:
        return (versions is not None and self.versions == versions
                and all(ref() is t for ref, t in zip(self.refs, tensors)))


_CACHE: dict[tuple[int, ...], _Packed] = {}
_LOCK = threading.Lock()


def _versions(tensors: tuple[Tensor, ...]) -> Optional[tuple[int, ...]]:
    if any(t.is_inference() for t in tensors):
        return None
    return tuple(t._version for t in tensors)


def _forget(key: tuple[int, ...]) -> None:
    with _LOCK:
        _CACHE.pop(key, None)


def packed_int8(*tensors: Tensor) -> tuple[Any, ...]:
    """The ``sketchcore.Int8Factor`` of each (int8 codes (k, n), float32 scales (n,)) pair of
    ``tensors``, packed on the first call and all again when one tensor was written in place (its
    version counter) or is another tensor (as a layer packed them before); a CUDA pair is packed
    from a host copy (the core copies the packed factor to the device on its first call there)."""
    key, versions = tuple(id(t) for t in tensors), _versions(tensors)
    entry = _CACHE.get(key)
    if entry is not None and entry.matches(tensors, versions):
        return entry.factors
    factors = tuple(sketchcore.Int8Factor(codes.detach().cpu().numpy(), scale.detach().cpu().numpy())
                    for codes, scale in zip(tensors[::2], tensors[1::2]))
    with _LOCK:
        _CACHE[key] = _Packed(tensors, versions, factors)
    if entry is None or entry.refs[0]() is not tensors[0]:  # a new set: forgotten when its first codes die
        weakref.finalize(tensors[0], _forget, key)
    return factors


# --- the bodies: float32 in the kernel, the result in x's dtype ----------------------------------

def _in_dtype(kernel_call: Any, x: Tensor, d_out: int) -> Tensor:
    if x.shape[:-1].numel() == 0:  # no rows: nothing to compute (the binding wants an output with strides to check)
        return x.new_empty((*x.shape[:-1], d_out))
    x32 = x if x.dtype == torch.float32 else x.float()  # one copy: the kernel reads float32
    y: Tensor = kernel_call(x32)
    return y if x.dtype == torch.float32 else y.to(x.dtype)


def _sketched_body(x: Tensor, S_q: Tensor, S_scale: Tensor, U_q: Tensor, U_scale: Tensor, bias: Optional[Tensor],
                   activation: str, inner_activation: str) -> Tensor:
    S, U = packed_int8(S_q, S_scale, U_q, U_scale)
    inner: Any = None if inner_activation == "none" else inner_activation  # names the binding checks
    return _in_dtype(lambda x32: sketchcore.int8_sketched_matmul(  # looked up per call: tests may replace it
        x32, S, U, bias=bias, activation=cast(Any, activation), inner_activation=inner), x, U_q.shape[-1])


def _linear_body(x: Tensor, W_q: Tensor, W_scale: Tensor, bias: Optional[Tensor], activation: str) -> Tensor:
    W, = packed_int8(W_q, W_scale)
    return _in_dtype(lambda x32: sketchcore.int8_matmul(x32, W, bias=bias, activation=cast(Any, activation)), x,
                     W_q.shape[-1])


# --- the operators ---------------------------------------------------------------------------------

@torch.library.custom_op("sketchcore::int8_sketched_linear", mutates_args=())
def _int8_sketched_linear(x: Tensor, S_q: Tensor, S_scale: Tensor, U_q: Tensor, U_scale: Tensor,
                          bias: Optional[Tensor], activation: str, inner_activation: str) -> Tensor:
    return _sketched_body(x, S_q, S_scale, U_q, U_scale, bias, activation, inner_activation)


@_int8_sketched_linear.register_fake
def _(x: Tensor, S_q: Tensor, S_scale: Tensor, U_q: Tensor, U_scale: Tensor, bias: Optional[Tensor], activation: str,
      inner_activation: str) -> Tensor:
    return x.new_empty((*x.shape[:-1], U_q.shape[-1]))


@torch.library.custom_op("sketchcore::int8_linear", mutates_args=())
def _int8_linear(x: Tensor, W_q: Tensor, W_scale: Tensor, bias: Optional[Tensor], activation: str) -> Tensor:
    return _linear_body(x, W_q, W_scale, bias, activation)


@_int8_linear.register_fake
def _(x: Tensor, W_q: Tensor, W_scale: Tensor, bias: Optional[Tensor], activation: str) -> Tensor:
    return x.new_empty((*x.shape[:-1], W_q.shape[-1]))


def _refusal(op: str) -> RuntimeError:
    return RuntimeError(f"sketchcore::{op}: expected no input that requires grad under grad mode "
                        "(torch.no_grad() / torch.inference_mode()), got one: the int8 products are "
                        "inference only; train the float layers, then quantize")


def _refuse(op: str) -> Any:
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        # Called only when an input requires grad under grad mode: refuse before any backward, but
        # not while torch traces (torch.export and its decompositions run under grad mode, after
        # trainable embeddings, and train nothing; the traced program refuses when it runs)
        if _is_exporting() or any(isinstance(t, Tensor) and type(t) not in _PLAIN for t in inputs):
            return
        raise _refusal(op)

    def backward(ctx: Any, grad: Tensor) -> Any:  # reached only through a graph torch traced
        raise RuntimeError(f"sketchcore::{op}: inference only: the int8 products have no backward")
    return backward, setup_context


for _op in ("int8_sketched_linear", "int8_linear"):
    _backward, _setup = _refuse(_op)
    torch.library.register_autograd(f"sketchcore::{_op}", _backward, setup_context=_setup)


# --- what the layers call ----------------------------------------------------------------------------

def _eager(x: Tensor, *tensors: Optional[Tensor]) -> bool:
    """Whether the call may skip the dispatcher: plain tensors, no tracer (torch.compile,
    torch.export, torch.jit.trace) and no torch.func transform; else the operator runs."""
    if type(x) not in _PLAIN or any(t is not None and type(t) not in _PLAIN for t in tensors):
        return False
    if _is_compiling() or _is_exporting() or _is_tracing() or _functorch.transforms_active():
        return False
    return x.device.type != "meta"


def _check_no_grad(op: str, x: Tensor, bias: Optional[Tensor]) -> None:
    """The operators' refusal on the eager road (the binding itself detaches its inputs)."""
    if (x.requires_grad or (bias is not None and bias.requires_grad)) and _is_grad_enabled():
        raise _refusal(op)


def int8_sketched_linear(x: Tensor, S_q: Tensor, S_scale: Tensor, U_q: Tensor, U_scale: Tensor,
                         bias: Optional[Tensor] = None, activation: str = "none",
                         inner_activation: str = "none") -> Tensor:
    """``act(deq(q8(σ(deq(q8(x) S_q))) U_q) + bias)`` through ``sketchcore.int8_sketched_matmul``:
    directly in eager calls, through ``sketchcore::int8_sketched_linear`` where torch traces. x of
    any floating dtype (float32 read in place, others through one float32 copy; the result in x's
    dtype); codes int8, scales and bias float32. Inference only (the operator refuses inputs that
    require grad under grad mode; the layers check first)."""
    if _eager(x, S_q, S_scale, U_q, U_scale, bias):
        _check_no_grad("int8_sketched_linear", x, bias)
        return _sketched_body(x, S_q, S_scale, U_q, U_scale, bias, activation, inner_activation)
    out: Tensor = torch.ops.sketchcore.int8_sketched_linear(x, S_q, S_scale, U_q, U_scale, bias, activation,
                                                            inner_activation)
    return out


def int8_linear(x: Tensor, W_q: Tensor, W_scale: Tensor, bias: Optional[Tensor] = None,
                activation: str = "none") -> Tensor:
    """``act(deq(q8(x) W_q) + bias)`` through ``sketchcore.int8_matmul``, as
    :func:`int8_sketched_linear` (eager calls direct, ``sketchcore::int8_linear`` where torch traces)."""
    if _eager(x, W_q, W_scale, bias):
        _check_no_grad("int8_linear", x, bias)
        return _linear_body(x, W_q, W_scale, bias, activation)
    out: Tensor = torch.ops.sketchcore.int8_linear(x, W_q, W_scale, bias, activation)
    return out
