"""``Int8Linear``: a full-rank linear layer whose weight is stored as int8 with per-output-column
float32 scales, for inference through one int8 GEMM (``sketchcore.int8_matmul``; CPU, CUDA behind
a gate). What it shares with the low-rank 8-bit layers (buffers kept under ``.to(dtype)``, packing
once, the inference-only checks) is :class:`~sketchcore.torch.layers._quantized.QuantizedLayer`."""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch
from torch import Tensor, nn

from sketchcore.torch.ops._quantized_ops import FORMATS, int8_linear
from sketchcore.torch.layers._quantized import QuantizedLayer

__all__ = ["Int8Linear"]


class Int8Linear(QuantizedLayer):
    """``y = activation(deq(q8(x) W_q) + bias)``: a dense linear layer with an int8 weight, for inference.

    The weight W (in_features, out_features) — ``x @ W``, the transpose of ``nn.Linear.weight`` — is
    stored as int8 ``W_q`` with one float32 scale per output column ``W_scale`` (symmetric, scale =
    max|column|/127), the bias in float32; all three are buffers, so ``state_dict``/``load_state_dict``
    and ``restore_model`` carry them and ``.to(device)`` moves them (``.to(dtype)``/``.half()`` leave
    them as they are). Each input row is quantized dynamically (q8: row scale max|row|/127), the
    product accumulates in int32 and ``sketchcore.int8_matmul`` fuses the dequantisation, bias and
    activation: one int8 GEMM, the kernels of :class:`Int8LowRankLinear`. The weight is packed for the
    kernel once, on the first call after a buffer changes.

    Inference only: there are no parameters and no gradients. A layer in training mode, or an input
    that requires grad while grad mode is on, raises. A float32 input is used without a copy;
    float16, bfloat16 and float64 inputs are cast to float32 and the output cast back. On a CUDA
    device it runs a cuBLASLt int8 GEMM, a path not yet run on a GPU: it needs the gated path
    ``cuda_int8_factors`` open (``sketchcore.set_gated_path``), else the call raises RuntimeError.

    The arguments are those of :class:`Int8LowRankLinear` without ``rank`` and ``inner_activation``
    (``in_features``, ``out_features`` ≥ 1; ``bias``; ``activation`` one of "none", "relu", "gelu",
    "gelu_tanh", "silu" or None; ``device`` of the buffers, where the input must be), and so are
    the errors (ValueError for a size that is not an integer ≥ 1 or an unknown activation).

    Examples
    --------
    >>> _ = torch.manual_seed(0)
    >>> layer = Int8Linear.from_float(nn.Linear(64, 32).eval())
    >>> layer
    Int8Linear(in_features=64, out_features=32, bias=True, activation='none', quantize='int8')
    >>> with torch.no_grad():
    ...     layer(torch.randn(5, 64)).shape
    torch.Size([5, 32])
    """

    _packed_buffers = (("W_q", "W_scale"),)

    W_q: Tensor
    W_scale: Tensor
    activation: str

    def __init__(self, in_features: int, out_features: int, bias: bool = True, activation: Optional[str] = None,
                 device: Any = None) -> None:
        super().__init__(in_features, out_features, {"activation": activation}, FORMATS["int8"])
        self.register_buffer("W_q", torch.zeros(in_features, out_features, dtype=torch.int8, device=device))
        self.register_buffer("W_scale", torch.ones(out_features, dtype=torch.float32, device=device))
        self.register_buffer("bias", torch.zeros(out_features, dtype=torch.float32, device=device) if bias else None)

    @classmethod
    def from_float(cls, linear: nn.Linear, activation: Optional[str] = None) -> "Int8Linear":
        """The int8 version of ``linear`` (its training mode kept, as :meth:`Int8LowRankLinear.from_float`).

        Parameters
        ----------
        linear : nn.Linear
        activation : str, optional
            Applied after the bias (``nn.Linear`` has none).

        Returns
        -------
        Int8Linear
            On the CPU.

        Raises
        ------
        TypeError
            ``linear`` is not an ``nn.Linear``.

        Examples
        --------
        >>> Int8Linear.from_float(nn.Linear(8, 4, bias=False)).W_q.shape
        torch.Size([8, 4])
        >>> Int8Linear.from_float(nn.Conv1d(4, 4, 1))
        Traceback (most recent call last):
        TypeError: Int8Linear.from_float: linear: expected an nn.Linear, got Conv1d
        """
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"{cls.__name__}.from_float: linear: expected an nn.Linear, got {type(linear).__name__}")
        new = cls.from_matrix(linear.weight.detach().t(), None if linear.bias is None else linear.bias.detach(),
                              activation=activation)
        new.train(linear.training)
        return new

    @classmethod
    def from_matrix(cls, M: Any, bias: Any = None, activation: Optional[str] = None) -> "Int8Linear":
        """The layer ``x ↦ activation(x M + bias)`` with M quantized per column (in eval mode: an
        inference layer with no float layer whose mode to keep).

        Parameters
        ----------
        M : Tensor or array, shape (in_features, out_features)
            ``Wᵀ`` for an ``nn.Linear`` weight W (the convention of ``sketchcore.torch.compress``);
            any real floating dtype and device (quantized on the CPU).
        bias : Tensor or array, shape (out_features,), optional
        activation : str, optional

        Returns
        -------
        Int8Linear
            On the CPU, in eval mode.

        Raises
        ------
        ValueError
            M not 2-D, M with a non-finite value, a bias of another shape.
        TypeError
            M or bias not floating-point.

        Examples
        --------
        >>> layer = Int8Linear.from_matrix(torch.eye(3), bias=torch.ones(3))
        >>> layer(torch.tensor([[1.0, -2.0, 4.0]]))  # x's row quantized: steps of 4/127
        tensor([[ 2.0079, -1.0157,  5.0000]])
        """
        name = f"{cls.__name__}.from_matrix"
        m = torch.as_tensor(np.asarray(M) if not isinstance(M, Tensor) else M).detach()
        if not m.is_floating_point():
            raise TypeError(f"{name}: M: expected a floating-point matrix, got {m.dtype}")
        if m.ndim != 2:
            raise ValueError(f"{name}: M: expected a 2-D (in_features, out_features) matrix, got shape {tuple(m.shape)}")
        if not bool(torch.isfinite(m).all()):
            raise ValueError(f"{name}: M: expected finite values, got a NaN or infinity")
        new = cls(m.shape[0], m.shape[1], bias=bias is not None, activation=activation)
        new.W_q, new.W_scale = FORMATS["int8"].quantize_columns(m)
        if bias is not None:
            b = torch.as_tensor(np.asarray(bias) if not isinstance(bias, Tensor) else bias).detach()
            if not b.is_floating_point():
                raise TypeError(f"{name}: bias: expected a floating-point vector, got {b.dtype}")
            if tuple(b.shape) != (m.shape[1],):
                raise ValueError(f"{name}: bias: expected shape ({m.shape[1]},) (the columns of M), "
                                 f"got {tuple(b.shape)}")
            new.bias = b.to(device="cpu", dtype=torch.float32).clone()
        return new.eval()

    def dequantized_weight(self) -> Tensor:
        """W as float32, (in_features, out_features): ``W_q`` times its column's scale."""
        return self.W_q.float() * self.W_scale

    def to_linear(self) -> nn.Linear:
        """A float32 ``nn.Linear`` of the dequantized weight and the bias (the activation not included).

        Examples
        --------
        >>> Int8Linear.from_matrix(torch.eye(2)).to_linear().weight
        Parameter containing:
        tensor([[1., 0.],
                [0., 1.]], requires_grad=True)
        """
        W = self.dequantized_weight()
        linear = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None, device=W.device)
        with torch.no_grad():
            linear.weight.copy_(W.t())
            if self.bias is not None:
                linear.bias.copy_(self.bias)
        return linear

    def forward(self, x: Tensor) -> Tensor:
        self._check_inference(x)
        return int8_linear(x, self.W_q, self.W_scale, self.bias, self.activation)

    def layer_config(self) -> dict[str, Any]:
        """The configuration, saved in the state_dict's metadata (``restore_model`` rebuilds the
        layer from it)."""
        return {"sketchcore": type(self).__name__, "in_features": self.in_features,
                "out_features": self.out_features, "bias": self.bias is not None,
                "activation": self.activation, "quantize": self.format}

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, activation={self.activation!r}, quantize={self.format!r}")
