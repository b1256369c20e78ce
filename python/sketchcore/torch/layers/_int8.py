"""``Int8LowRankLinear``: a low-rank layer whose factors are stored as int8 with per-column
float32 scales, for inference through sketchcore's int8 sketched GEMM (CPU; CUDA behind a gate)."""
from __future__ import annotations

from typing import Any, Optional, Union

import torch
from torch import Tensor, nn

import sketchcore
from sketchcore._gates import require_gated_path
from sketchcore.torch._common import ACTIVATIONS, positive_int
from sketchcore.torch.layers._layer_state import SketchedLayer
from sketchcore.torch.layers._lowrank import LowRankLinear
from sketchcore.torch.layers._sklinear import SKLinear

#: The buffers a quantized layer keeps in float32 whatever ``.to(dtype)`` asks.
_FLOAT32_BUFFERS = ("S_scale", "U_scale", "bias")


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


def quantize_columns(factor: Tensor) -> tuple[Tensor, Tensor]:
    """``sketchcore.quantize_int8`` of a float factor (k, n): int8 (k, n) and float32 (n,) tensors."""
    q, scale = sketchcore.quantize_int8(factor.detach().to(device="cpu", dtype=torch.float32).contiguous().numpy())
    return torch.from_numpy(q), torch.from_numpy(scale)


class Int8LowRankLinear(SketchedLayer):
    """``y = activation(deq(q8(σ(deq(q8(x) S_q))) U_q) + bias)``: a :class:`LowRankLinear` (or a
    :class:`SKLinear`, whose 2T products are one S·U) with int8 factors, for inference.

    S (in, rank) and U (rank, out) are stored as int8 ``S_q``/``U_q`` with one float32 scale per
    column (``S_scale``, ``U_scale``; symmetric, scale = max|column|/127), the bias in float32;
    all are buffers, so ``state_dict``/``load_state_dict`` and ``restore_model`` carry them and
    ``.to(device)`` moves them (``.to(dtype)``/``.half()`` leave them as they are: int8 and
    float32). The input rows and the rank-wide intermediate are quantized dynamically per row
    (q8), the products accumulate in int32, and ``sketchcore.int8_sketched_matmul`` fuses the
    dequantisation, σ (``inner_activation``), bias and activation. The factors are packed for
    the kernel once, on the first call after they change.

    Inference only: there are no parameters and no gradients. On a CUDA device (the layer and
    the input there) it runs cuBLASLt int8 GEMMs, a path that has not yet run on a GPU: it needs
    the gated path ``cuda_int8_factors`` open (``sketchcore.set_gated_path``), else the call
    raises RuntimeError naming it. A layer in training mode, or an input that requires grad
    while grad mode is on, raises (train the float layer, then quantize it). A float32 input is used without a copy; float16, bfloat16 and float64
    inputs are cast to float32 (one copy of the input) and the output cast back to the input's
    dtype. Dropout is not part of inference and is dropped.

    Parameters
    ----------
    in_features, out_features, rank : int
        Sizes (≥ 1).
    bias : bool
    activation, inner_activation : {"none", "relu", "gelu", "gelu_tanh", "silu"}, optional
        None means ``"none"``.
    device : optional
        Of the buffers; the input must be on the same device.

    Raises
    ------
    ValueError
        A size that is not an integer ≥ 1; an unknown activation.

    Examples
    --------
    >>> from sketchcore.torch import LowRankLinear
    >>> _ = torch.manual_seed(0)
    >>> layer = Int8LowRankLinear.from_float(LowRankLinear(64, 32, rank=8).eval())
    >>> layer
    Int8LowRankLinear(in_features=64, out_features=32, rank=8, bias=True, activation='none', quantize='int8')
    >>> with torch.no_grad():
    ...     layer(torch.randn(5, 64)).shape
    torch.Size([5, 32])
    """

    S_q: Tensor
    S_scale: Tensor
    U_q: Tensor
    U_scale: Tensor
    bias: Optional[Tensor]

    def __init__(self, in_features: int, out_features: int, rank: int, bias: bool = True,
                 activation: Optional[str] = None, inner_activation: Optional[str] = None, device: Any = None) -> None:
        super().__init__()
        self.in_features = positive_int(in_features, "in_features", "Int8LowRankLinear")
        self.out_features = positive_int(out_features, "out_features", "Int8LowRankLinear")
        self.rank = positive_int(rank, "rank", "Int8LowRankLinear")
        for what, value in (("activation", activation), ("inner_activation", inner_activation)):
            if (value or "none") not in ACTIVATIONS:
                raise ValueError(f"Int8LowRankLinear: {what}: expected one of {ACTIVATIONS} or None, got {value!r}")
        self.activation = activation or "none"
        self.inner_activation = inner_activation or "none"
        self.register_buffer("S_q", torch.zeros(in_features, rank, dtype=torch.int8, device=device))
        self.register_buffer("S_scale", torch.ones(rank, dtype=torch.float32, device=device))
        self.register_buffer("U_q", torch.zeros(rank, out_features, dtype=torch.int8, device=device))
        self.register_buffer("U_scale", torch.ones(out_features, dtype=torch.float32, device=device))
        self.register_buffer("bias", torch.zeros(out_features, dtype=torch.float32, device=device) if bias else None)
        self._packed: Optional[tuple[tuple[Any, ...], Any, Any]] = None

    @classmethod
    def from_float(cls, layer: Union[LowRankLinear, SKLinear]) -> "Int8LowRankLinear":
        """The int8 version of a float low-rank layer (its training mode kept).

        Parameters
        ----------
        layer : LowRankLinear or SKLinear

        Returns
        -------
        Int8LowRankLinear
            On the CPU.

        Raises
        ------
        TypeError
            ``layer`` is of another type (an ``nn.Linear``: convert it with ``sketch_model``
            first, or quantize it with torch's ``quantize_dynamic``).

        Examples
        --------
        >>> from sketchcore.torch import SKLinear
        >>> Int8LowRankLinear.from_float(SKLinear(64, 32, num_terms=2, low_rank=4)).rank
        16
        >>> Int8LowRankLinear.from_float(nn.Linear(4, 4))
        Traceback (most recent call last):
        TypeError: Int8LowRankLinear.from_float: layer: expected a LowRankLinear or SKLinear, got Linear ...
        """
        if not isinstance(layer, (LowRankLinear, SKLinear)):
            raise TypeError(f"Int8LowRankLinear.from_float: layer: expected a LowRankLinear or SKLinear, got "
                            f"{type(layer).__name__} (convert it with sketch_model first; torch's "
                            "quantize_dynamic quantizes nn.Linear)")
        S, U = float_factors(layer)
        new = cls(layer.in_features, layer.out_features, S.shape[1], bias=layer.bias is not None,
                  activation=layer.activation, inner_activation=getattr(layer, "inner_activation", None))
        new.S_q, new.S_scale = quantize_columns(S)
        new.U_q, new.U_scale = quantize_columns(U)
        if layer.bias is not None:
            new.bias = layer.bias.detach().to(device="cpu", dtype=torch.float32).clone()
        new.train(layer.training)
        return new

    def dequantized_factors(self) -> tuple[Tensor, Tensor]:
        """S and U as float32: ``q * scale`` per column.

        Examples
        --------
        >>> layer = Int8LowRankLinear(8, 4, rank=2)
        >>> [tuple(f.shape) for f in layer.dequantized_factors()]
        [(8, 2), (2, 4)]
        """
        return self.S_q.float() * self.S_scale, self.U_q.float() * self.U_scale

    def to_linear(self) -> nn.Linear:
        """A float32 ``nn.Linear`` whose weight is the dequantized (S U)ᵀ (the activation not included).

        Raises
        ------
        ValueError
            With an inner activation (σ(x S) U has no dense weight).

        Examples
        --------
        >>> Int8LowRankLinear(8, 4, rank=2).to_linear()
        Linear(in_features=8, out_features=4, bias=True)
        """
        if self.inner_activation != "none":
            raise ValueError(f"Int8LowRankLinear.to_linear: expected a linear layer (inner_activation 'none'), got "
                             f"inner_activation={self.inner_activation!r}: σ(x S) U has no dense weight")
        S, U = self.dequantized_factors()
        linear = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None, device=S.device)
        with torch.no_grad():
            linear.weight.copy_((S @ U).t())
            if self.bias is not None:
                linear.bias.copy_(self.bias)
        return linear

    def _apply(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        # .half()/.to(dtype) cast floating buffers, but the kernel reads float32 scales and bias:
        # keep the exact values, moved to the new device only
        before = {name: self._buffers[name] for name in _FLOAT32_BUFFERS if self._buffers.get(name) is not None}
        result = super()._apply(fn, *args, **kwargs)
        for name, value in before.items():
            after = self._buffers[name]
            if after is not None and after.dtype != torch.float32:
                self._buffers[name] = value.to(device=after.device)
        return result

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        return {**state, "_packed": None}  # the packed factors are rebuilt, not copied or pickled

    def _factors(self) -> tuple[Any, Any]:
        """The packed ``Int8Factor`` pair, rebuilt when a buffer was replaced or written."""
        tensors = (self.S_q, self.S_scale, self.U_q, self.U_scale)
        key = tuple((id(t), t._version) for t in tensors)
        if self._packed is None or self._packed[0] != key:
            # Packed on the host (a CUDA layer's buffers are copied once); the core copies the
            # packed factors to a device on their first call there.
            S = sketchcore.Int8Factor(self.S_q.cpu().numpy(), self.S_scale.cpu().numpy())
            U = sketchcore.Int8Factor(self.U_q.cpu().numpy(), self.U_scale.cpu().numpy())
            self._packed = (key, S, U)
        return self._packed[1], self._packed[2]

    def _check_inference(self, x: Tensor) -> None:
        if self.training:
            raise RuntimeError("Int8LowRankLinear: expected eval mode (call model.eval()), got training mode: "
                               "training through int8 factors is not supported; train the float layers, then quantize")
        if x.requires_grad and torch.is_grad_enabled():
            raise RuntimeError("Int8LowRankLinear: expected an input without requires_grad or grad mode off "
                               "(torch.no_grad() / torch.inference_mode()), got an input that requires grad: "
                               "training through int8 factors is not supported")
        if not x.is_floating_point():
            raise TypeError(f"Int8LowRankLinear: x: expected a floating-point tensor, got {x.dtype}")
        if x.device != self.S_q.device:
            raise RuntimeError(f"Int8LowRankLinear: x: expected a tensor on the layer's device {self.S_q.device}, "
                               f"got device {x.device}")
        if x.device.type == "cuda":
            require_gated_path("cuda_int8_factors", "Int8LowRankLinear on a CUDA tensor")
        if x.shape[-1:] != (self.in_features,):
            raise ValueError(f"Int8LowRankLinear: x: expected shape (..., {self.in_features}), got {tuple(x.shape)}")

    def forward(self, x: Tensor) -> Tensor:
        self._check_inference(x)
        S, U = self._factors()
        x32 = x if x.dtype == torch.float32 else x.float()  # one copy: the kernel reads float32
        inner = self.inner_activation if self.inner_activation != "none" else None
        y: Tensor = sketchcore.int8_sketched_matmul(x32, S, U, bias=self.bias, activation=self.activation,
                                                    inner_activation=inner)
        return y if x.dtype == torch.float32 else y.to(x.dtype)

    def layer_config(self) -> dict[str, Any]:
        """The configuration, saved in the state_dict's metadata (``restore_model`` rebuilds the
        layer from it).

        Examples
        --------
        >>> Int8LowRankLinear(8, 4, rank=2).layer_config()  # doctest: +NORMALIZE_WHITESPACE
        {'sketchcore': 'Int8LowRankLinear', 'in_features': 8, 'out_features': 4, 'rank': 2, 'bias': True,
         'activation': 'none', 'inner_activation': 'none', 'quantize': 'int8'}
        """
        return {"sketchcore": "Int8LowRankLinear", "in_features": self.in_features,
                "out_features": self.out_features, "rank": self.rank, "bias": self.bias is not None,
                "activation": self.activation, "inner_activation": self.inner_activation, "quantize": "int8"}

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, rank={self.rank}, "
                f"bias={self.bias is not None}, activation={self.activation!r}"
                + (f", inner_activation={self.inner_activation!r}" if self.inner_activation != "none" else "")
                + ", quantize='int8'")
