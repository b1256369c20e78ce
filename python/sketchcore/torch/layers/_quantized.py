"""The 8-bit inference layers. ``QuantizedLayer``: codes and per-column float32 scales kept as
buffers (exact under ``.to(dtype)``), packing for the kernel once (again when a buffer changes), the
inference-only and device checks, pickling without the packing — the base of the low-rank layer and
of the full-rank :class:`Int8Linear`. ``QuantizedLowRankLinear``: the low-rank layer in any format of
the formats' table (``ops/_quantized_ops.FORMATS``: the codes' dtype, the quantizer, the packed
factor type, the kernel and its operator, the devices and the gate are the row's), with two
factors, conversion from a float layer and the configuration. :class:`Int8LowRankLinear` and
:class:`Fp8LowRankLinear` are it with the format fixed."""
from __future__ import annotations

from typing import Any, ClassVar, Optional, TypeVar, Union

import torch
from torch import Tensor, nn

from sketchcore._gates import require_gated_path
from sketchcore.torch._common import ACTIVATIONS, positive_int
from sketchcore.torch.ops._quantized_ops import FORMATS, QuantFormat, quant_format, quantized_sketched_linear
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

    #: The (codes, scales) buffer pairs, packed in this order.
    _packed_buffers: ClassVar[tuple[tuple[str, str], ...]]

    bias: Optional[Tensor]
    #: The format's name (the ``quantize`` entry of the configuration and the repr).
    format: str

    def __init__(self, in_features: int, out_features: int, activations: dict[str, Optional[str]],
                 fmt: QuantFormat) -> None:
        super().__init__()
        name = type(self).__name__
        self._quant, self.format = fmt, fmt.name
        self.in_features = positive_int(in_features, "in_features", name)
        self.out_features = positive_int(out_features, "out_features", name)
        for what, value in activations.items():
            if (value or "none") not in ACTIVATIONS:
                raise ValueError(f"{name}: {what}: expected one of {ACTIVATIONS} or None, got {value!r}")
            setattr(self, what, value or "none")
        self._packed: Optional[tuple[tuple[Any, ...], tuple[Any, ...]]] = None

    @property
    def code_dtype(self) -> torch.dtype:
        """The dtype of the codes (the format's)."""
        return self._quant.code_dtype

    def _check_device(self, x: Tensor) -> None:
        """Refuses a device the format's kernels do not run on (``x`` on the layer's device) and a
        CUDA call while the format's gated path is closed. Meta tensors and ``torch.export`` pass:
        they run no kernel (an exported program's operator refuses where it runs)."""
        kind = x.device.type
        if kind not in self._quant.devices and kind != "meta" and not torch.compiler.is_exporting():
            raise self._quant.device_error(type(self).__name__, x.device)
        if kind == "cuda":
            require_gated_path(self._quant.gate, f"{type(self).__name__} on a CUDA tensor")

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
            packed = tuple(self._quant.pack(self._buffers[q], self._buffers[scale])  # type: ignore[arg-type]
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


_Q = TypeVar("_Q", bound="QuantizedLowRankLinear")


class QuantizedLowRankLinear(QuantizedLayer):
    """``y = activation(deq(q(σ(deq(q(x) S_q))) U_q) + bias)``: a :class:`LowRankLinear` (or a
    :class:`SKLinear`, whose 2T products are one S·U) with 8-bit factors in ``format``, for inference.

    S (in, rank) and U (rank, out) are stored as 8-bit codes ``S_q``/``U_q`` (``torch.int8`` for
    ``"int8"``, ``torch.float8_e4m3fn`` for ``"fp8"``) with one float32 scale per column
    (``S_scale``, ``U_scale``; symmetric, scale = max|column| / the format's largest code: 127, 448),
    the bias in float32; all are buffers, so ``state_dict``/``load_state_dict`` and
    ``restore_model`` carry them and ``.to(device)`` moves them (``.to(dtype)``/``.half()`` leave
    them as they are). The input rows and the rank-wide intermediate are quantized per row on the
    fly (q, in the format), and the format's sketched GEMM (``sketchcore.int8_sketched_matmul``,
    ``sketchcore.fp8_sketched_matmul``) fuses the dequantisation, σ (``inner_activation``), bias
    and activation. The factors are packed for the kernel once, on the first call after they change.
    Under ``torch.export``, ``torch.compile`` and ONNX export the layer calls the format's custom
    operator (``sketchcore::int8_sketched_linear``, ``sketchcore::fp8_sketched_linear``).

    The format decides the devices: ``"int8"`` runs on the CPU, and on CUDA behind the gated path
    ``cuda_int8_factors``; ``"fp8"`` runs on CUDA devices of compute capability 8.9 or newer only,
    behind ``cuda_fp8_factors`` (``sketchcore.set_gated_path``). An input on another device, or on
    CUDA while the gate is closed, raises RuntimeError naming it (``torch.export`` of the model
    still traces: the exported program's operator refuses where it runs).

    Inference only: there are no parameters and no gradients. A layer in training mode, or an
    input that requires grad while grad mode is on, raises (train the float layer, then quantize
    it). A float32 input is used without a copy; float16, bfloat16 and float64 inputs are cast to
    float32 (one copy of the input) and the output cast back to the input's dtype. Dropout is not
    part of inference and is dropped. :class:`Int8LowRankLinear` and :class:`Fp8LowRankLinear`
    are this layer with the format fixed: the same buffers, state_dict and outputs.

    Parameters
    ----------
    in_features, out_features, rank : int
        Sizes (≥ 1).
    bias : bool
    activation, inner_activation : {"none", "relu", "gelu", "gelu_tanh", "silu"}, optional
        None means ``"none"``.
    device : optional
        Of the buffers; the input must be on the same device.
    format : {"int8", "fp8"}, optional
        A row of the formats' table (keyword only). None: the class's format — ``"int8"`` here,
        the fixed one of a named subclass (which refuses another).

    Raises
    ------
    ValueError
        A size that is not an integer ≥ 1; an unknown activation; an unknown ``format``.

    Examples
    --------
    >>> from sketchcore.torch import LowRankLinear
    >>> _ = torch.manual_seed(0)
    >>> base = LowRankLinear(64, 32, rank=8).eval()
    >>> layer = QuantizedLowRankLinear.from_float(base, format="int8")
    >>> layer
    QuantizedLowRankLinear(in_features=64, out_features=32, rank=8, bias=True, activation='none', quantize='int8')
    >>> with torch.no_grad():
    ...     layer(torch.randn(5, 64)).shape
    torch.Size([5, 32])
    >>> QuantizedLowRankLinear.from_float(base, format="fp8").S_q.dtype
    torch.float8_e4m3fn
    >>> QuantizedLowRankLinear(64, 32, 8, format="int4")
    Traceback (most recent call last):
    ValueError: QuantizedLowRankLinear: format: expected one of ('int8', 'fp8'), got 'int4'
    """

    _packed_buffers = (("S_q", "S_scale"), ("U_q", "U_scale"))
    # the class name labels how the layer was made: a state_dict of Int8LowRankLinear loads into
    # QuantizedLowRankLinear(format="int8") and back (the format, "quantize", must match)
    _CONFIG_LABELS = (*QuantizedLayer._CONFIG_LABELS, "sketchcore")
    #: The format a named subclass fixes (None: the ``format`` argument chooses, "int8" by default).
    fixed_format: ClassVar[Optional[str]] = None

    S_q: Tensor
    S_scale: Tensor
    U_q: Tensor
    U_scale: Tensor
    activation: str
    inner_activation: str

    def __init__(self, in_features: int, out_features: int, rank: int, bias: bool = True,
                 activation: Optional[str] = None, inner_activation: Optional[str] = None, device: Any = None, *,
                 format: Optional[str] = None) -> None:
        fmt = self._format_row(format, type(self).__name__)
        super().__init__(in_features, out_features, {"activation": activation, "inner_activation": inner_activation},
                         fmt)
        self.rank = positive_int(rank, "rank", type(self).__name__)
        self.register_buffer("S_q", torch.zeros(in_features, rank, dtype=fmt.code_dtype, device=device))
        self.register_buffer("S_scale", torch.ones(rank, dtype=torch.float32, device=device))
        self.register_buffer("U_q", torch.zeros(rank, out_features, dtype=fmt.code_dtype, device=device))
        self.register_buffer("U_scale", torch.ones(out_features, dtype=torch.float32, device=device))
        self.register_buffer("bias", torch.zeros(out_features, dtype=torch.float32, device=device) if bias else None)

    @classmethod
    def _format_row(cls, format: object, where: str) -> QuantFormat:
        """The row of ``format`` (None: the class's); a ValueError for an unknown one, or one other
        than a named subclass's."""
        if format is None:
            return FORMATS[cls.fixed_format or "int8"]
        fmt = quant_format(format, where)
        if cls.fixed_format is not None and fmt.name != cls.fixed_format:
            raise ValueError(f"{where}: format: expected {cls.fixed_format!r} (the format of {cls.__name__}) or "
                             f"None, got {format!r}: use QuantizedLowRankLinear(..., format={format!r})")
        return fmt

    @classmethod
    def from_float(cls: type[_Q], layer: Union[LowRankLinear, SKLinear], format: Optional[str] = None) -> _Q:
        """The quantized version of a float low-rank layer (its training mode kept), on the CPU
        (move it with ``.to(device)``).

        Parameters
        ----------
        layer : LowRankLinear or SKLinear
        format : {"int8", "fp8"}, optional
            None: the class's format (as the constructor's ``format``).

        Returns
        -------
        QuantizedLowRankLinear
            Of the class it is called on.

        Raises
        ------
        TypeError
            ``layer`` is of another type (an ``nn.Linear``: convert it with ``sketch_model``
            first, or quantize it with torch's ``quantize_dynamic``).
        ValueError
            An unknown ``format``.
        """
        where = f"{cls.__name__}.from_float"
        if not isinstance(layer, (LowRankLinear, SKLinear)):
            raise TypeError(f"{where}: layer: expected a LowRankLinear or SKLinear, got "
                            f"{type(layer).__name__} (convert it with sketch_model first; torch's "
                            "quantize_dynamic quantizes nn.Linear)")
        fmt = cls._format_row(format, where)
        S, U = float_factors(layer)
        new = cls(layer.in_features, layer.out_features, S.shape[1], bias=layer.bias is not None,
                  activation=layer.activation, inner_activation=getattr(layer, "inner_activation", None),
                  format=fmt.name)
        new.S_q, new.S_scale = fmt.quantize_columns(S)
        new.U_q, new.U_scale = fmt.quantize_columns(U)
        if layer.bias is not None:
            new.bias = layer.bias.detach().to(device="cpu", dtype=torch.float32).clone()
        new.train(layer.training)
        return new

    _from_float = from_float  # the name compress/_float_standins.py requantizes through

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
        self._check_inference(x)
        return quantized_sketched_linear(self._quant, x, self.S_q, self.S_scale, self.U_q, self.U_scale, self.bias,
                                         self.activation, self.inner_activation)

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
