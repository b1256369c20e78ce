"""``Fp8LowRankLinear``: a low-rank layer whose factors are stored as e4m3 (fp8) codes with
per-column float32 scales, for inference through sketchcore's fp8 sketched GEMM (CUDA devices of
compute capability 8.9 or newer, behind a gate until it has run on one)."""
from __future__ import annotations

from typing import Any, Callable, Union

import torch
from torch import Tensor

import sketchcore
from sketchcore.torch.layers._lowrank import LowRankLinear
from sketchcore.torch.layers._quantized import QuantizedLowRankLinear
from sketchcore.torch.layers._sklinear import SKLinear

__all__ = ["Fp8LowRankLinear"]


def quantize_columns_e4m3(factor: Tensor) -> tuple[Tensor, Tensor]:
    """``sketchcore.quantize_e4m3`` of a float factor (k, n): float8_e4m3fn (k, n) codes (the
    encoding is the same, so ``.float()`` decodes them) and float32 (n,) scales, on the CPU."""
    codes, scale = sketchcore.quantize_e4m3(factor.detach().to(device="cpu", dtype=torch.float32).contiguous().numpy())
    return torch.from_numpy(codes).view(torch.float8_e4m3fn), torch.from_numpy(scale)


class Fp8LowRankLinear(QuantizedLowRankLinear):
    """``y = activation(deq(f8(σ(deq(f8(x) S_q))) U_q) + bias)``: a :class:`LowRankLinear` (or a
    :class:`SKLinear`, whose 2T products are one S·U) with e4m3 factors, for inference on a GPU.

    S (in, rank) and U (rank, out) are stored as ``torch.float8_e4m3fn`` ``S_q``/``U_q`` with one
    float32 scale per column (``S_scale``, ``U_scale``; scale = max|column|/448), the bias in
    float32; all are buffers, so ``state_dict``/``load_state_dict`` and ``restore_model`` carry them
    and ``.to(device)`` moves them (``.to(dtype)``/``.half()`` leave them as they are). The input
    rows and the rank-wide intermediate are quantized to e4m3 per row on the device and
    ``sketchcore.fp8_sketched_matmul`` runs the two products in cuBLASLt with the dequantisation,
    σ (``inner_activation``), bias and activation fused. The factors are packed once, on the first
    call after they change, and copied to the device on their first call there.

    Runs on CUDA only: the layer and the input on a CUDA device of compute capability 8.9 or newer
    (Ada, Hopper and later). That path has not yet run on a GPU: it needs the gated path
    ``cuda_fp8_factors`` open (``sketchcore.set_gated_path``), else the call raises RuntimeError
    naming it. On the CPU use :class:`Int8LowRankLinear`. Inference only, as
    :class:`Int8LowRankLinear`: a layer in training mode, or an input that requires grad while grad
    mode is on, raises. A float32 input is used without a copy; other floating inputs are cast to
    float32 and the output back to their dtype.

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
    >>> layer = Fp8LowRankLinear.from_float(LowRankLinear(64, 32, rank=8).eval())
    >>> layer
    Fp8LowRankLinear(in_features=64, out_features=32, rank=8, bias=True, activation='none', quantize='fp8')
    >>> layer.S_q.dtype
    torch.float8_e4m3fn
    """

    format = "fp8"
    code_dtype = torch.float8_e4m3fn
    gate = "cuda_fp8_factors"
    quantize_columns = staticmethod(quantize_columns_e4m3)

    @classmethod
    def from_float(cls, layer: Union[LowRankLinear, SKLinear]) -> "Fp8LowRankLinear":
        """The fp8 version of a float low-rank layer (its training mode kept), on the CPU: move it
        to a CUDA device with ``.to("cuda")``.

        Raises
        ------
        TypeError
            ``layer`` is of another type (an ``nn.Linear``: convert it with ``sketch_model`` first).
        """
        return super()._from_float(layer)  # type: ignore[no-any-return]

    def _pack(self, codes: Tensor, scale: Tensor) -> Any:
        return sketchcore.Fp8Factor(codes.view(torch.uint8).numpy(), scale.numpy())

    def _kernel(self) -> Callable[..., Tensor]:
        return sketchcore.fp8_sketched_matmul  # looked up per call: tests may replace it

    def _check_device(self, x: Tensor) -> None:
        if x.device.type != "cuda":
            raise RuntimeError(f"Fp8LowRankLinear: x: expected a tensor on a CUDA device (fp8 factors run in "
                               f"cuBLASLt on compute capability 8.9 or newer), got device {x.device}: move the "
                               "model with .to('cuda'), or quantize to 'int8' for the CPU")
        super()._check_device(x)
