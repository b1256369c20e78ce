"""``Int8LowRankLinear``: :class:`QuantizedLowRankLinear` with the format fixed to int8 (factors as
int8 codes with per-column float32 scales, for inference through sketchcore's int8 sketched GEMM:
CPU; CUDA behind a gate)."""
from __future__ import annotations

import torch  # noqa: F401 - the docstring examples use it
from torch import nn  # noqa: F401 - the docstring examples use it

from sketchcore.torch.layers._quantized import QuantizedLowRankLinear

__all__ = ["Int8LowRankLinear"]


class Int8LowRankLinear(QuantizedLowRankLinear):
    """``y = activation(deq(q8(σ(deq(q8(x) S_q))) U_q) + bias)``: :class:`QuantizedLowRankLinear`
    with ``format="int8"`` — int8 codes ``S_q``/``U_q`` (scale = max|column|/127), the input rows
    and the rank-wide intermediate quantized per row, int32 sums, through
    ``sketchcore.int8_sketched_matmul`` (``sketchcore::int8_sketched_linear`` where torch traces).
    CPU inference; on a CUDA device cuBLASLt int8 GEMMs, a path that has not yet run on a GPU,
    behind the gated path ``cuda_int8_factors``. The arguments, buffers, methods and errors are
    :class:`QuantizedLowRankLinear`'s (``format``, if given, must be ``"int8"``).

    Examples
    --------
    >>> from sketchcore.torch import LowRankLinear, QuantizedLowRankLinear, SKLinear
    >>> _ = torch.manual_seed(0)
    >>> base = LowRankLinear(64, 32, rank=8).eval()
    >>> layer = Int8LowRankLinear.from_float(base)
    >>> layer
    Int8LowRankLinear(in_features=64, out_features=32, rank=8, bias=True, activation='none', quantize='int8')
    >>> x = torch.randn(5, 64)
    >>> with torch.no_grad():
    ...     layer(x).shape, torch.equal(layer(x), QuantizedLowRankLinear.from_float(base, format="int8")(x))
    (torch.Size([5, 32]), True)
    >>> Int8LowRankLinear.from_float(SKLinear(64, 32, num_terms=2, low_rank=4)).rank
    16
    >>> Int8LowRankLinear.from_float(nn.Linear(4, 4))
    Traceback (most recent call last):
    TypeError: Int8LowRankLinear.from_float: layer: expected a LowRankLinear or SKLinear, got Linear ...
    """

    fixed_format = "int8"
