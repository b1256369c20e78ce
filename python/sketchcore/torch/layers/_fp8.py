"""``Fp8LowRankLinear``: :class:`QuantizedLowRankLinear` with the format fixed to fp8 (factors as e4m3
codes with per-column float32 scales, for inference through sketchcore's fp8 sketched GEMM on CUDA
devices of compute capability 8.9 or newer, behind a gate until it has run on one)."""
from __future__ import annotations

import torch  # noqa: F401 - the docstring examples use it

from sketchcore.torch.layers._quantized import QuantizedLowRankLinear

__all__ = ["Fp8LowRankLinear"]


class Fp8LowRankLinear(QuantizedLowRankLinear):
    """``y = activation(deq(f8(σ(deq(f8(x) S_q))) U_q) + bias)``: :class:`QuantizedLowRankLinear`
    with ``format="fp8"`` — ``torch.float8_e4m3fn`` codes ``S_q``/``U_q`` (scale = max|column|/448),
    the input rows and the rank-wide intermediate quantized to e4m3 per row on the device, cuBLASLt
    fp8 GEMMs with float32 sums, through ``sketchcore.fp8_sketched_matmul``
    (``sketchcore::fp8_sketched_linear`` where torch traces).

    Runs on CUDA only: the layer and the input on a device of compute capability 8.9 or newer (Ada,
    Hopper and later), a path that has not yet run on a GPU, behind the gated path
    ``cuda_fp8_factors``; on the CPU use :class:`Int8LowRankLinear`. ``from_float`` makes the layer
    on the CPU: move it with ``.to("cuda")``. ``torch.export`` of a model holding it traces on any
    device. The arguments, buffers, methods and errors are :class:`QuantizedLowRankLinear`'s
    (``format``, if given, must be ``"fp8"``).

    Examples
    --------
    >>> from sketchcore.torch import LowRankLinear
    >>> layer = Fp8LowRankLinear.from_float(LowRankLinear(64, 32, rank=8).eval())
    >>> layer
    Fp8LowRankLinear(in_features=64, out_features=32, rank=8, bias=True, activation='none', quantize='fp8')
    >>> layer.S_q.dtype
    torch.float8_e4m3fn
    """

    fixed_format = "fp8"
