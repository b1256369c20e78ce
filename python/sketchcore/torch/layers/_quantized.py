"""What the 8-bit inference layers share. ``QuantizedLayer``: codes and per-column float32 scales
kept as buffers (exact under ``.to(dtype)``), packing for the kernel once (again when a buffer
changes), the inference-only checks, the float32 round trip of the input, pickling without the
packing — the base of the low-rank layers and of the full-rank :class:`Int8Linear`.
``QuantizedLowRankLinear``: what the int8 and fp8 low-rank layers add — two factors, conversion from
a float layer, the configuration. A subclass names its format and supplies the codes' dtype, the
quantizer, the packed factor type and the kernel."""
from __future__ import annotations

from typing import Any, Callable, ClassVar, Optional, Union

import torch
from torch import Tensor, nn

from sketchcore._gates import require_gated_path
from sketchcore.torch._common import ACTIVATIONS, positive_int
from sketchcore.torch.layers._layer_state import SketchedLayer
from sketchcore.torch.layers._lowrank import LowRankLinear
from sketchcore.torch.layers._sklinear import SKLinear

def float_factors(layer: Union[LowRankLinear, SKLinear]) -> tuple[Tensor, Tensor]:
    """The (S, U) of ``layer`` with ``x S U`` its linear part: LowRankLinear's own factors, or
    SKLinear's 2T terms joined, S = [S1_1 … S1_T U2_1 … U2_T] (in, 2Tk) and
    U = [U1_1; …; U1_T; S2_1; …; S2_T] / (2T) (2Tk, out)."""
    if isinstance(layer, LowRankLinear):
        return layer.S.detach(), layer.U.detach()
    T = layer.num_terms
    S = torch.cat([*layer.S1s.detach().unbind(0), *layer.U2s.detach().unbind(0)], dim=1)
    U = torch.cat([*layer.U1s.detach().unbind(0), *layer.S2s.detach().unbind(0)], dim=0) / (2 * T)
    return S, U


class QuantizedLayer(SketchedLayer):
    """Base of the 8-bit inference layers: buffers of codes and float32 scales named by
    ``_packed_buffers`` (pairs packed for the kernel by ``_pack``, once, and again after a buffer
    is replaced or written), a float32 ``bias`` buffer or None, the inference-only checks and the
    float32 round trip of the input. ``.to(dtype)``/``.half()`` leave every one of these buffers
    as it is (the kernel reads the codes and float32 scales), ``.to(device)`` moves them. Not
    instantiated itself."""

    #: The format's name (the ``quantize`` entry of the configuration and the repr).
    format: ClassVar[str]
    #: The dtype of the codes.
    code_dtype: ClassVar[torch.dtype]
    #: The gated path a CUDA call needs open.
    gate: ClassVar[str]
    #: The (codes, scales) buffer pairs, packed in this order.
    _packed_buffers: ClassVar[tuple[tuple[str, str], ...]]

    bias: Optional[Tensor]

    def __init__(self, in_features: int, out_features: int, activations: dict[str, Optional[str]]) -> None:
        super().__init__()
        name = type(self).__name__
        self.in_features = positive_int(in_features, "in_features", name)
        self.out_features = positive_int(out_features, "out_features", name)
        for what, value in activations.items():
            if (value or "none") not in ACTIVATIONS:
                raise ValueError(f"{name}: {what}: expected one of {ACTIVATIONS} or None, got {value!r}")
            setattr(self, what, value or "none")
        self._packed: Optional[tuple[tuple[Any, ...], tuple[Any, ...]]] = None

    def _pack(self, codes: Tensor, scale: Tensor) -> Any:
        """The kernel's packed factor of host codes and scales."""
        raise NotImplementedError

    def _check_device(self, x: Tensor) -> None:
        """Refuses a device the format's kernel does not run on (``x`` on the layer's device)."""
        if x.device.type == "cuda":
            require_gated_path(self.gate, f"{type(self).__name__} on a CUDA tensor")

    def _apply(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        # .half()/.to(dtype) cast floating buffers (fp8 codes among them), but the kernel reads the
        # codes as they are and float32 scales and bias: keep the exact values, moved to the new
        # device only
        kept = (*(name for pair in self._packed_buffers for name in pair), "bias")
        before: dict[str, Tensor] = {name: b for name in kept if (b := self._buffers.get(name)) is not None}
        result = super()._apply(fn, *args, **kwargs)
        for name, value in before.items():
            after = self._buffers[name]
            if after is not None and after.dtype != value.dtype:
                self._buffers[name] = value.to(device=after.device)
        return result

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        return {**state, "_packed": None}  # the packed factors are rebuilt, not copied or pickled

    def _packed_factors(self) -> tuple[Any, ...]:
        """The packed factors, one per pair of ``_packed_buffers``, rebuilt when a buffer was
        replaced or written."""
        tensors = [self._buffers[name] for pair in self._packed_buffers for name in pair]
        key = tuple((id(t), t._version) for t in tensors if t is not None)
        if self._packed is None or self._packed[0] != key:
            # Packed on the host (a CUDA layer's buffers are copied once); the core copies the
            # packed factors to a device on their first call there.
            packed = tuple(self._pack(self._buffers[q].cpu(), self._buffers[scale].cpu())  # type: ignore[union-attr]
                           for q, scale in self._packed_buffers)
            self._packed = (key, packed)
        return self._packed[1]

    def _check_inference(self, x: Tensor) -> None:
        name, fmt = type(self).__name__, self.format
        if self.training:
            raise RuntimeError(f"{name}: expected eval mode (call model.eval()), got training mode: training "
                               f"through {fmt} factors is not supported; train the float layers, then quantize")
        # torch.export traces under grad mode (the input requires grad after trainable layers such as
        # embeddings): tracing trains nothing, and the exported program's operator refuses at run time
        if x.requires_grad and torch.is_grad_enabled() and not torch.compiler.is_exporting():
            raise RuntimeError(f"{name}: expected an input without requires_grad or grad mode off "
                               "(torch.no_grad() / torch.inference_mode()), got an input that requires grad: "
                               f"training through {fmt} factors is not supported")
        if not x.is_floating_point():
            raise TypeError(f"{name}: x: expected a floating-point tensor, got {x.dtype}")
        device = self._buffers[self._packed_buffers[0][0]].device  # type: ignore[union-attr]
        if x.device != device:
            raise RuntimeError(f"{name}: x: expected a tensor on the layer's device {device}, got device {x.device}")
        self._check_device(x)
        if x.shape[-1:] != (self.in_features,):
            raise ValueError(f"{name}: x: expected shape (..., {self.in_features}), got {tuple(x.shape)}")

    def _run(self, kernel: Callable[..., Tensor], x: Tensor, **options: Any) -> Tensor:
        """After the inference checks, ``kernel(x, *packed factors, bias=self.bias, activation=...,
        **options)`` on a float32 ``x``, the result in ``x``'s dtype."""
        self._check_inference(x)
        factors = self._packed_factors()
        x32 = x if x.dtype == torch.float32 else x.float()  # one copy: the kernel reads float32
        y: Tensor = kernel(x32, *factors, bias=self.bias, activation=self.activation, **options)  # type: ignore[attr-defined]
        return y if x.dtype == torch.float32 else y.to(x.dtype)


class QuantizedLowRankLinear(QuantizedLayer):
    """Base of :class:`Int8LowRankLinear` and :class:`Fp8LowRankLinear`: ``y = activation(deq(q(σ(deq(q(x)
    S_q))) U_q) + bias)`` with S (in, rank) and U (rank, out) stored as 8-bit codes ``S_q``/``U_q``
    and one float32 scale per column (``S_scale``, ``U_scale``), the bias in float32 — all buffers,
    so ``state_dict``, ``restore_model`` and ``.to(device)`` carry them, while ``.to(dtype)`` leaves
    them as they are. Inference only: no parameters, no gradients; a layer in training mode or an
    input that requires grad under grad mode raises. Not instantiated itself."""

    _packed_buffers = (("S_q", "S_scale"), ("U_q", "U_scale"))

    S_q: Tensor
    S_scale: Tensor
    U_q: Tensor
    U_scale: Tensor
    activation: str
    inner_activation: str

    def __init__(self, in_features: int, out_features: int, rank: int, bias: bool = True,
                 activation: Optional[str] = None, inner_activation: Optional[str] = None, device: Any = None) -> None:
        super().__init__(in_features, out_features, {"activation": activation, "inner_activation": inner_activation})
        self.rank = positive_int(rank, "rank", type(self).__name__)
        self.register_buffer("S_q", torch.zeros(in_features, rank, dtype=self.code_dtype, device=device))
        self.register_buffer("S_scale", torch.ones(rank, dtype=torch.float32, device=device))
        self.register_buffer("U_q", torch.zeros(rank, out_features, dtype=self.code_dtype, device=device))
        self.register_buffer("U_scale", torch.ones(out_features, dtype=torch.float32, device=device))
        self.register_buffer("bias", torch.zeros(out_features, dtype=torch.float32, device=device) if bias else None)

    # -- the format: supplied by each subclass ------------------------------------------------
    @staticmethod
    def quantize_columns(factor: Tensor) -> tuple[Tensor, Tensor]:
        """Codes (k, n) and float32 scales (n,) of a float factor (k, n), on the CPU."""
        raise NotImplementedError

    def _kernel(self) -> Callable[..., Tensor]:
        """The sketched matmul of the format."""
        raise NotImplementedError

    # -- shared ------------------------------------------------------------------------------
    @classmethod
    def _from_float(cls, layer: Union[LowRankLinear, SKLinear]) -> Any:
        if not isinstance(layer, (LowRankLinear, SKLinear)):
            raise TypeError(f"{cls.__name__}.from_float: layer: expected a LowRankLinear or SKLinear, got "
                            f"{type(layer).__name__} (convert it with sketch_model first; torch's "
                            "quantize_dynamic quantizes nn.Linear)")
        S, U = float_factors(layer)
        new = cls(layer.in_features, layer.out_features, S.shape[1], bias=layer.bias is not None,
                  activation=layer.activation, inner_activation=getattr(layer, "inner_activation", None))
        new.S_q, new.S_scale = cls.quantize_columns(S)
        new.U_q, new.U_scale = cls.quantize_columns(U)
        if layer.bias is not None:
            new.bias = layer.bias.detach().to(device="cpu", dtype=torch.float32).clone()
        new.train(layer.training)
        return new

    def dequantized_factors(self) -> tuple[Tensor, Tensor]:
        """S and U as float32: the codes' values (``.float()`` of int8 or float8_e4m3fn) times their
        column's scale."""
        return self.S_q.float() * self.S_scale, self.U_q.float() * self.U_scale

    def to_linear(self) -> nn.Linear:
        """A float32 ``nn.Linear`` whose weight is the dequantized (S U)ᵀ (the activation not included).

        Raises
        ------
        ValueError
            With an inner activation (σ(x S) U has no dense weight).
        """
        if self.inner_activation != "none":
            raise ValueError(f"{type(self).__name__}.to_linear: expected a linear layer (inner_activation 'none'), "
                             f"got inner_activation={self.inner_activation!r}: σ(x S) U has no dense weight")
        S, U = self.dequantized_factors()
        linear = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None, device=S.device)
        with torch.no_grad():
            linear.weight.copy_((S @ U).t())
            if self.bias is not None:
                linear.bias.copy_(self.bias)
        return linear

    def _factors(self) -> tuple[Any, Any]:
        """The packed factor pair, rebuilt when a buffer was replaced or written."""
        S, U = self._packed_factors()
        return S, U

    def forward(self, x: Tensor) -> Tensor:
        inner = self.inner_activation if self.inner_activation != "none" else None
        return self._run(self._kernel(), x, inner_activation=inner)

    def layer_config(self) -> dict[str, Any]:
        """The configuration, saved in the state_dict's metadata (``restore_model`` rebuilds the
        layer from it)."""
        return {"sketchcore": type(self).__name__, "in_features": self.in_features,
                "out_features": self.out_features, "rank": self.rank, "bias": self.bias is not None,
                "activation": self.activation, "inner_activation": self.inner_activation, "quantize": self.format}

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, rank={self.rank}, "
                f"bias={self.bias is not None}, activation={self.activation!r}"
                + (f", inner_activation={self.inner_activation!r}" if self.inner_activation != "none" else "")
                + f", quantize={self.format!r}")
