"""``LowRankLinear``: ``act(x S U + b)`` with learnable S (in, rank) and U (rank, out), half the
FLOPs of an SKLinear with the same number of parameters, converted from a trained layer by a
truncated SVD (the optimal factors, Eckart–Young)."""
from __future__ import annotations

import math
from typing import Any, Optional

import torch
from torch import Tensor, nn

from sketchcore.torch import _factors
from sketchcore.torch import _eager, _functorch
from sketchcore.torch._functional import _ACTIVATIONS, _dropout_seed, sketched_linear
from sketchcore.torch._modules import _check_saved_shape, dense_copy


def _positive_int(value: object, name: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where}: {name}: expected an integer ≥ 1, got {value!r}")
    return value


class LowRankLinear(nn.Module):
    """``y = activation(x S U + bias)``: a rank-``rank`` linear layer through sketchcore's fused
    sketched GEMM (bias and activation in the epilogue, backward in the core).

    From scratch, S and U are drawn so that the output variance matches ``nn.Linear``'s
    (S uniform in ±1/√in, U uniform in ±√(3/rank)); :meth:`from_linear` converts a trained
    layer with its truncated SVD instead. ``weight`` is the dense equivalent, (out, in).
    """

    def __init__(self, in_features: int, out_features: int, rank: int, bias: bool = True,
                 activation: Optional[str] = None, dtype: Optional[torch.dtype] = None,
                 device: Any = None) -> None:
        super().__init__()
        self.in_features = _positive_int(in_features, "in_features", "LowRankLinear")
        self.out_features = _positive_int(out_features, "out_features", "LowRankLinear")
        self.rank = _positive_int(rank, "rank", "LowRankLinear")
        self.activation = activation or "none"
        if self.activation not in _ACTIVATIONS:
            raise ValueError(f"LowRankLinear: activation: expected one of {_ACTIVATIONS} or None, got {activation!r}")
        kwargs = {"dtype": dtype or torch.get_default_dtype(), "device": device}
        s_bound, u_bound = 1 / math.sqrt(in_features), math.sqrt(3 / rank)
        self.S = nn.Parameter(torch.empty(in_features, rank, **kwargs).uniform_(-s_bound, s_bound))
        self.U = nn.Parameter(torch.empty(rank, out_features, **kwargs).uniform_(-u_bound, u_bound))
        if bias:
            self.bias: Optional[nn.Parameter] = nn.Parameter(torch.empty(out_features, **kwargs).uniform_(-s_bound, s_bound))
        else:
            self.register_parameter("bias", None)

    @classmethod
    def from_linear(cls, linear: nn.Linear, rank: Optional[int] = None, *, tolerance: Optional[float] = None,
                    activation: Optional[str] = None) -> "LowRankLinear":
        """The best rank-``rank`` approximation of ``linear`` (truncated SVD, balanced factors);
        with ``tolerance`` instead, the smallest rank whose relative weight error
        ‖W − W_r‖_F / ‖W‖_F is at most ``tolerance``. Bias, dtype and device are kept."""
        M = linear.weight.detach().t()
        if (rank is None) == (tolerance is None):
            raise ValueError("LowRankLinear.from_linear: expected exactly one of rank and tolerance, got "
                             f"rank={rank!r}, tolerance={tolerance!r}")
        if tolerance is not None:
            if not 0.0 <= tolerance < 1.0:
                raise ValueError(f"LowRankLinear.from_linear: tolerance: expected a number in [0, 1), got {tolerance!r}")
            rank, _ = _factors.rank_for_tolerance(M, tolerance)
        rank = _positive_int(rank, "rank", "LowRankLinear.from_linear")
        if rank > min(M.shape):
            raise ValueError(f"LowRankLinear.from_linear: rank: expected at most min(in, out) = {min(M.shape)}, "
                             f"got {rank}")
        layer = cls(linear.in_features, linear.out_features, rank, bias=linear.bias is not None,
                    activation=activation, dtype=linear.weight.dtype, device=linear.weight.device)
        A, B = _factors.balanced_factors(M, rank)
        with torch.no_grad():
            layer.S.copy_(A)
            layer.U.copy_(B)
            if linear.bias is not None and layer.bias is not None:
                layer.bias.copy_(linear.bias)
        return layer

    __jit_unused_properties__ = ["weight"]  # TorchScript compiles forward only

    @property
    def weight(self) -> Tensor:
        """The dense equivalent (out, in), as ``nn.Linear.weight``: computed on each access
        (one in·rank·out product), read-only."""
        return (self.S @ self.U).t()

    def to_linear(self) -> nn.Linear:
        """An ``nn.Linear`` computing the same affine map (the activation is not included)."""
        return dense_copy(self, self.S)

    @torch.jit.unused
    def _under_torch_func(self, x: Tensor) -> Optional[Tensor]:
        """The forward through the functional API: torch.func transforms and plain eager calls
        (the eager fast path: no dispatcher, no torch._dynamo import on the first call); None
        where the operator must be called (never compiled by TorchScript)."""
        params = self._parameters  # not self.S: see SKLinear._python_path
        S, U, bias = params["S"], params["U"], params["bias"]
        if _eager.applies(x, S, U, bias):
            return _eager.sketched_linear(x, S, U, bias, self.activation, 1.0, 0.0, _eager.NO_SEED)
        if not _functorch.transforms_active():
            return None
        return sketched_linear(x, S, U, bias, activation=self.activation)

    def forward(self, x: Tensor) -> Tensor:
        if not torch.jit.is_scripting():
            transformed = self._under_torch_func(x)
            if transformed is not None:
                return transformed
        y, _ = torch.ops.sketchcore.sketched_linear(x, self.S, self.U, self.bias, self.activation, 1.0, 0.0,
                                                    _dropout_seed(None, 0.0))
        return y

    def get_extra_state(self) -> dict[str, Any]:
        """The configuration, saved in the state_dict so that ``restore_model`` can rebuild the
        layer without the dense model."""
        return {"sketchcore": "LowRankLinear", "in_features": self.in_features, "out_features": self.out_features,
                "rank": self.rank, "bias": self.bias is not None, "activation": self.activation}

    def set_extra_state(self, state: Any) -> None:
        """Checks that the saved layer has this one's shape; adopts its activation."""
        _check_saved_shape(self, state, ("in_features", "out_features", "rank", "bias"))
        self.activation = state["activation"]

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, rank={self.rank}, "
                f"bias={self.bias is not None}, activation={self.activation!r}")
