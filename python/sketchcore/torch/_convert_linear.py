"""Converting one linear map (an ``nn.Linear``, a ``Conv1D`` or any registered type, given as
M = Wᵀ (in × out) and its bias) into a ``LowRankLinear`` or an ``SKLinear``: sized by rank,
parameter ratio or tolerance, with factors from the weight's SVD or, given the Gram matrix of
calibration activations, from the whitened truncation that minimises the output error."""
from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor, nn

from sketchcore import _ranks
from sketchcore.torch import _factors, _whitened
from sketchcore.torch._lowrank import LowRankLinear
from sketchcore.torch._modules import SKLinear
from sketchcore.torch._pretraining import random_balanced_factors


def per_rank(layer: str, n_in: int, n_out: int, num_terms: Optional[int]) -> int:
    """Learnable parameters per unit of rank (per unit of k for SKLinear/SKConv2d)."""
    if layer == "skconv2d":  # the learnable S (2T blocks of in × k); the U1s are fixed sketches
        assert num_terms is not None
        return 2 * num_terms * n_in
    return _ranks.factored_size(n_in, n_out, 1 if layer == "lowrank" else num_terms)  # type: ignore[arg-type]


def choose_rank(n_in: int, n_out: int, layer: str, num_terms: Optional[int], low_rank: Optional[int],
                tolerance: Optional[float], param_ratio: Optional[float], tolerance_rank: Any) -> tuple[int, str]:
    """The rank (k per term for SKLinear/SKConv2d) and, when the layer should stay dense, the
    reason. ``tolerance_rank()`` gives the smallest total rank meeting the tolerance (from
    the weight's or the whitened singular values), called only when sizing by tolerance.

    A rank the caller fixes (``low_rank``) is kept as given; a chosen one follows
    :mod:`sketchcore._ranks` (multiples of 64 from 256, else of 16): rounded down within the
    ``param_ratio`` budget, rounded up to meet the tolerance while the layer stays smaller
    than dense."""
    dense = n_in * n_out
    unit = per_rank(layer, n_in, n_out, num_terms)
    if low_rank is not None:
        return low_rank, ""
    full = min(n_in, n_out) if layer == "lowrank" else dense  # a LowRankLinear is full rank at min(in, out)
    if param_ratio is not None:
        rank = _ranks.aligned_rank_within(min(int(param_ratio * dense // unit), full))
        return (rank, "") if rank >= 1 else (0, f"no rank ≥ 1 fits param_ratio={param_ratio}")
    assert tolerance is not None
    needed = int(tolerance_rank())
    if layer in ("sklinear", "skconv2d"):
        assert num_terms is not None
        needed = -(-needed // (2 * num_terms))  # k per term: 2·T·k singular directions
    break_even = -(-dense // unit)  # the smallest rank with no fewer parameters than dense
    if needed >= break_even:
        return 0, f"tolerance {tolerance} needs rank {needed}, not fewer parameters than dense"
    rank = _ranks.aligned_rank_at_least(needed, below=break_even)
    if rank is None:
        return 0, (f"tolerance {tolerance} needs rank {needed}, and the next rank the GPU kernels like is not fewer "
                   f"parameters than dense")
    return rank, ""


def build(M: Tensor, bias: Optional[Tensor], layer: str, rank: int, num_terms: Optional[int], init: str,
          Vt: Optional[Tensor], dtype: torch.dtype, device: torch.device, kwargs: dict[str, Any]) -> nn.Module:
    """The new layer for M (in × out) and bias. ``Vt``: the whitened output directions
    (data-aware factors) or None (the weight's SVD). ``init="panther"`` ignores both."""
    n_in, n_out = M.shape
    has_bias = bias is not None
    new: nn.Module
    if layer == "lowrank":
        new = LowRankLinear(n_in, n_out, rank, bias=has_bias, dtype=dtype, device=device, **kwargs)
        if init == "random":
            A, B = random_balanced_factors(M, rank)
        else:
            A, B = _factors.balanced_factors(M, rank) if Vt is None else _whitened.lowrank_factors(M, Vt, rank)
        with torch.no_grad():
            new.S.copy_(A)
            new.U.copy_(B)
    else:
        assert num_terms is not None
        if Vt is None or init != "svd":
            new = SKLinear(n_in, n_out, num_terms, rank, W_init=M.t(), bias=has_bias, dtype=dtype, device=device,
                           init=init, **kwargs)
        else:  # drawn without a weight, then given the data-aware factors (in place: the packed layout stays)
            new = SKLinear(n_in, n_out, num_terms, rank, bias=has_bias, dtype=dtype, device=device, init="linear",
                           **kwargs)
            S1s, S2s, U1s, U2s = _whitened.sklinear_factors(M, Vt, num_terms, rank)
            with torch.no_grad():
                new.S1s.copy_(S1s)
                new.S2s.copy_(S2s)
                new.U1s.copy_(U1s)
                new.U2s.copy_(U2s)
            new.init = "svd"
    if bias is not None:
        with torch.no_grad():
            new.bias.copy_(bias)  # type: ignore[union-attr, operator]
    return new


def dense_equivalent(new: nn.Module) -> Tensor:
    """M_new (in × out) of a LowRankLinear or SKLinear, from its factors, in float64."""
    with torch.no_grad():
        if isinstance(new, LowRankLinear):  # with an inner activation: the product of its factors
            return new.S.to(torch.float64) @ new.U.to(torch.float64)
        assert isinstance(new, SKLinear)
        S1s, S2s, U1s, U2s = (t.to(torch.float64) for t in (new.S1s, new.S2s, new.U1s, new.U2s))
        return (torch.bmm(S1s, U1s).sum(0) + torch.bmm(U2s, S2s).sum(0)) / (2 * new.num_terms)
