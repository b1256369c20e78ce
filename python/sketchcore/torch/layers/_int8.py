"""``Int8LowRankLinear``: a low-rank layer whose factors are stored as int8 with per-column
float32 scales, for inference through sketchcore's int8 sketched GEMM (CPU; CUDA behind a gate)."""
from __future__ import annotations

from typing import Any, Union

import torch
from torch import Tensor, nn

import sketchcore
from sketchcore.torch.ops._quantized_ops import int8_sketched_linear
from sketchcore.torch.layers._lowrank import LowRankLinear
from sketchcore.torch.layers._quantized import QuantizedLowRankLinear
from sketchcore.torch.layers._sklinear import SKLinear

__all__ = ["Int8Format", "Int8LowRankLinear", "pack_int8", "quantize_columns"]


def quantize_columns(factor: Tensor) -> tuple[Tensor, Tensor]:
    """``sketchcore.quantize_int8`` of a float factor (k, n): int8 (k, n) and float32 (n,) tensors."""
    q, scale = sketchcore.quantize_int8(factor.detach().to(device="cpu", dtype=torch.float32).contiguous().numpy())
    return torch.from_numpy(q), torch.from_numpy(scale)


def pack_int8(codes: Tensor, scale: Tensor) -> Any:
    """The ``sketchcore.Int8Factor`` of host int8 codes (k, n) and float32 scales (n,)."""
    return sketchcore.Int8Factor(codes.numpy(), scale.numpy())


class Int8Format:
    """The int8 format's entries of a quantized layer (a mixin before its ``QuantizedLayer`` base):
    its name, the codes' dtype, the gated path of its CUDA kernels and the packing."""

    format = "int8"
    code_dtype = torch.int8
    gate = "cuda_int8_factors"
    _pack = staticmethod(pack_int8)


class Int8LowRankLinear(Int8Format, QuantizedLowRankLinear):
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

    quantize_columns = staticmethod(quantize_columns)

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
        return super()._from_float(layer)  # type: ignore[no-any-return]

    def forward(self, x: Tensor) -> Tensor:
        self._check_inference(x)
        return int8_sketched_linear(x, self.S_q, self.S_scale, self.U_q, self.U_scale, self.bias, self.activation,
                                    self.inner_activation)
