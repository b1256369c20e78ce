"""sketchcore's 8-bit inference GEMMs as torch custom operators, with fake kernels (``torch.export``,
``torch.compile``) and an autograd rule that refuses to differentiate; and the functions the
quantized layers call, which take the operators only where torch traces (eager calls go straight
to the binding, as fast as before).

A format is one row of :data:`FORMATS` (:class:`QuantFormat`: the codes' dtype, the binding's packed
factor type, sketched GEMM and column quantizer, the devices its kernels run on and the gated path of
CUDA): a low-rank operator ``sketchcore::<format>_sketched_linear`` is generated for each row
(``sketchcore::int8_sketched_linear``, ``sketchcore::fp8_sketched_linear``), so a new format is a new
row. The full-rank ``sketchcore::int8_linear`` exists for int8 only.

The operators take the codes and float32 scales as tensors (a packed ``sketchcore.Int8Factor`` or
``Fp8Factor`` cannot cross an operator's boundary); both roads pack them through one cache keyed on
the format and the tensors themselves (identity, checked through weak references, and version
counters), so a layer's factors are packed once and again only after a buffer is replaced or
written. Importing this module registers the operators."""
from __future__ import annotations

import functools
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Optional, cast

import torch
from torch import Tensor

import sketchcore
from sketchcore.torch._common import refuse_legacy_onnx_export
from sketchcore.torch.ops import _functorch

__all__ = ["FORMATS", "QuantFormat", "int8_linear", "int8_sketched_linear", "packed", "quant_format",
           "quantized_sketched_linear"]

_PLAIN = (torch.Tensor, torch.nn.Parameter)
_is_compiling = torch.compiler.is_compiling
_is_exporting = torch.compiler.is_exporting
_is_grad_enabled = torch.is_grad_enabled
_is_tracing: Any = torch.jit.is_tracing  # type: ignore[attr-defined]


# --- the formats ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class QuantFormat:
    """One 8-bit format of the quantized layers, a row of :data:`FORMATS`. The binding's names
    (``factor``, ``sketched_matmul``, ``quantizer``) are attributes of ``sketchcore``, looked up
    per call (tests replace them)."""

    #: the format's name: the layers' ``format``, the configuration's ``quantize`` entry
    name: str
    #: the dtype of the codes a layer keeps
    code_dtype: torch.dtype
    #: the dtype the binding reads the codes as (fp8: their bytes, uint8)
    binding_dtype: torch.dtype
    #: the binding's packed factor type, built from (codes, float32 column scales)
    factor: str
    #: the binding's sketched GEMM ``f(x, S, U, *, bias, activation, inner_activation)``
    sketched_matmul: str
    #: the binding's column quantizer of a float32 array: (codes, scales)
    quantizer: str
    #: the device types its kernels run on (the CPU has no fp8 kernel)
    devices: tuple[str, ...]
    #: the gated path a CUDA call needs open
    gate: str
    #: where the kernels run, in words, and what to do elsewhere (the device error's text)
    device_note: str
    advice: str

    def __reduce__(self) -> tuple[Any, ...]:
        return _row, (self.name,)  # a pickled or copied layer shares the table's row

    @property
    def operator(self) -> str:
        """The low-rank operator's name in the ``sketchcore`` namespace."""
        return f"{self.name}_sketched_linear"

    def quantize_columns(self, factor: Tensor) -> tuple[Tensor, Tensor]:
        """Codes (k, n) in ``code_dtype`` and float32 scales (n,) of a float factor (k, n), on the CPU."""
        host = factor.detach().to(device="cpu", dtype=torch.float32).contiguous().numpy()
        codes, scale = getattr(sketchcore, self.quantizer)(host)
        return torch.from_numpy(codes).view(self.code_dtype), torch.from_numpy(scale)

    def pack(self, codes: Tensor, scale: Tensor) -> Any:
        """The binding's packed factor of codes (k, n) and float32 scales (n,), from host copies."""
        return getattr(sketchcore, self.factor)(codes.detach().cpu().view(self.binding_dtype).numpy(),
                                                scale.detach().cpu().numpy())

    def device_error(self, who: str, device: torch.device) -> RuntimeError:
        """The refusal of an input on a device the format has no kernel for."""
        kinds = " or ".join(kind.upper() for kind in self.devices)
        return RuntimeError(f"{who}: x: expected a tensor on a {kinds} device ({self.device_note}), got device "
                            f"{device}: {self.advice}")


#: The 8-bit formats, by name: one row each.
FORMATS: dict[str, QuantFormat] = {
    "int8": QuantFormat("int8", torch.int8, torch.int8, "Int8Factor", "int8_sketched_matmul", "quantize_int8",
                        ("cpu", "cuda"), "cuda_int8_factors",
                        "int8 factors run on the CPU, and on CUDA behind the gated path cuda_int8_factors",
                        "move the model with .to('cpu')"),
    "fp8": QuantFormat("fp8", torch.float8_e4m3fn, torch.uint8, "Fp8Factor", "fp8_sketched_matmul", "quantize_e4m3",
                       ("cuda",), "cuda_fp8_factors",
                       "fp8 factors run in cuBLASLt on compute capability 8.9 or newer",
                       "move the model with .to('cuda'), or quantize to 'int8' for the CPU"),
}


def _row(name: str) -> QuantFormat:
    return FORMATS[name]


def quant_format(name: object, where: str) -> QuantFormat:
    """The row of ``name``; a ValueError naming ``where``'s ``format`` argument and the valid names."""
    row = FORMATS.get(name) if isinstance(name, str) else None
    if row is None:
        raise ValueError(f"{where}: format: expected one of {tuple(FORMATS)}, got {name!r}")
    return row


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


_CACHE: dict[tuple[Any, ...], _Packed] = {}
_LOCK = threading.Lock()


def _versions(tensors: tuple[Tensor, ...]) -> Optional[tuple[int, ...]]:
    if any(t.is_inference() for t in tensors):
        return None
    return tuple(t._version for t in tensors)


def _forget(key: tuple[Any, ...]) -> None:
    with _LOCK:
        _CACHE.pop(key, None)


def packed(fmt: QuantFormat, *tensors: Tensor) -> tuple[Any, ...]:
    """The packed factor (``fmt.pack``) of each (codes (k, n), float32 scales (n,)) pair of
    ``tensors``, packed on the first call and all again when one tensor was written in place (its
    version counter) or is another tensor (as a layer packed them before); a CUDA pair is packed
    from a host copy (the core copies the packed factor to the device on its first call there)."""
    key, versions = (fmt.name, *(id(t) for t in tensors)), _versions(tensors)
    entry = _CACHE.get(key)
    if entry is not None and entry.matches(tensors, versions):
        return entry.factors
    factors = tuple(fmt.pack(codes, scale) for codes, scale in zip(tensors[::2], tensors[1::2]))
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


def _sketched_body(fmt: QuantFormat, x: Tensor, S_q: Tensor, S_scale: Tensor, U_q: Tensor, U_scale: Tensor,
                   bias: Optional[Tensor], activation: str, inner_activation: str) -> Tensor:
    S, U = packed(fmt, S_q, S_scale, U_q, U_scale)
    inner: Any = None if inner_activation == "none" else inner_activation  # names the binding checks
    kernel = getattr(sketchcore, fmt.sketched_matmul)  # looked up per call: tests may replace it
    return _in_dtype(lambda x32: kernel(x32, S, U, bias=bias, activation=activation, inner_activation=inner), x,
                     U_q.shape[-1])


def _linear_body(x: Tensor, W_q: Tensor, W_scale: Tensor, bias: Optional[Tensor], activation: str) -> Tensor:
    W, = packed(FORMATS["int8"], W_q, W_scale)
    return _in_dtype(lambda x32: sketchcore.int8_matmul(x32, W, bias=bias, activation=cast(Any, activation)), x,
                     W_q.shape[-1])


# --- the operators ---------------------------------------------------------------------------------

def _sketched_fake(x: Tensor, S_q: Tensor, S_scale: Tensor, U_q: Tensor, U_scale: Tensor, bias: Optional[Tensor],
                   activation: str, inner_activation: str) -> Tensor:
    return x.new_empty((*x.shape[:-1], U_q.shape[-1]))


def _define_sketched(fmt: QuantFormat) -> Any:
    """Registers ``sketchcore::<format>_sketched_linear`` (its kernel refuses a device the format
    has no kernel for, as the layers do in eager calls) and returns its ``torch.ops`` packet."""
    name = f"sketchcore::{fmt.operator}"

    def kernel(x: Tensor, S_q: Tensor, S_scale: Tensor, U_q: Tensor, U_scale: Tensor, bias: Optional[Tensor],
               activation: str, inner_activation: str) -> Tensor:
        if x.device.type not in fmt.devices:  # an exported program run where the format has no kernel
            raise fmt.device_error(name, x.device)
        return _sketched_body(fmt, x, S_q, S_scale, U_q, U_scale, bias, activation, inner_activation)

    torch.library.custom_op(name, kernel, mutates_args=()).register_fake(_sketched_fake)
    return getattr(torch.ops.sketchcore, fmt.operator)


#: format name → its low-rank operator (``torch.ops.sketchcore.<format>_sketched_linear``)
_OPERATORS: dict[str, Any] = {fmt.name: _define_sketched(fmt) for fmt in FORMATS.values()}


@torch.library.custom_op("sketchcore::int8_linear", mutates_args=())
def _int8_linear(x: Tensor, W_q: Tensor, W_scale: Tensor, bias: Optional[Tensor], activation: str) -> Tensor:
    return _linear_body(x, W_q, W_scale, bias, activation)


@_int8_linear.register_fake
def _(x: Tensor, W_q: Tensor, W_scale: Tensor, bias: Optional[Tensor], activation: str) -> Tensor:
    return x.new_empty((*x.shape[:-1], W_q.shape[-1]))


def _refusal(op: str) -> RuntimeError:
    return RuntimeError(f"sketchcore::{op}: expected no input that requires grad under grad mode "
                        "(torch.no_grad() / torch.inference_mode()), got one: the 8-bit products are "
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
        raise RuntimeError(f"sketchcore::{op}: inference only: the 8-bit products have no backward")
    return backward, setup_context


for _op in (*(fmt.operator for fmt in FORMATS.values()), "int8_linear"):
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


def quantized_sketched_linear(fmt: QuantFormat, x: Tensor, S_q: Tensor, S_scale: Tensor, U_q: Tensor,
                              U_scale: Tensor, bias: Optional[Tensor] = None, activation: str = "none",
                              inner_activation: str = "none") -> Tensor:
    """``act(deq(q(σ(deq(q(x) S_q))) U_q) + bias)`` in format ``fmt`` (q its per-row quantization)
    through the binding's ``fmt.sketched_matmul``: directly in eager calls, through
    ``sketchcore::<format>_sketched_linear`` where torch traces. x of any floating dtype (float32
    read in place, others through one float32 copy; the result in x's dtype); codes in
    ``fmt.code_dtype``, scales and bias float32. Inference only (the operator refuses inputs that
    require grad under grad mode; the layers check first)."""
    if _eager(x, S_q, S_scale, U_q, U_scale, bias):
        _check_no_grad(fmt.operator, x, bias)
        return _sketched_body(fmt, x, S_q, S_scale, U_q, U_scale, bias, activation, inner_activation)
    refuse_legacy_onnx_export(fmt.operator)
    out: Tensor = _OPERATORS[fmt.name](x, S_q, S_scale, U_q, U_scale, bias, activation, inner_activation)
    return out


#: :func:`quantized_sketched_linear` in int8: ``sketchcore.int8_sketched_matmul``, or the operator
#: ``sketchcore::int8_sketched_linear`` where torch traces.
int8_sketched_linear = functools.partial(quantized_sketched_linear, FORMATS["int8"])


def int8_linear(x: Tensor, W_q: Tensor, W_scale: Tensor, bias: Optional[Tensor] = None,
                activation: str = "none") -> Tensor:
    """``act(deq(q8(x) W_q) + bias)`` through ``sketchcore.int8_matmul``, as
    :func:`quantized_sketched_linear` (eager calls direct, ``sketchcore::int8_linear`` where torch traces)."""
    if _eager(x, W_q, W_scale, bias):
        _check_no_grad("int8_linear", x, bias)
        return _linear_body(x, W_q, W_scale, bias, activation)
    refuse_legacy_onnx_export("int8_linear")
    out: Tensor = torch.ops.sketchcore.int8_linear(x, W_q, W_scale, bias, activation)
    return out
