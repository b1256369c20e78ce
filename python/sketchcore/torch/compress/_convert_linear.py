"""Building the layer that replaces one linear map (given as M = Wᵀ (in × out) and its bias): a
``LowRankLinear`` or an ``SKLinear`` of a given rank, with factors from the weight's SVD or,
given the whitened output directions of calibration activations, from the whitened truncation
that minimises the output error; and the dense matrix a built layer computes."""
from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor, nn

from sketchcore.torch.layers import _factors
from sketchcore.torch.compress import _whitened
from sketchcore.torch.layers._lowrank import LowRankLinear
from sketchcore.torch.layers._sklinear import SKLinear
from sketchcore.torch.compress._pretraining import random_balanced_factors


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
