"""``LowRankLinear``: ``act(x S U + b)`` with learnable S (in, rank) and U (rank, out), half the
FLOPs of an SKLinear with the same number of parameters, converted from a trained layer by a
truncated SVD (the optimal factors, Eckart–Young)."""
from __future__ import annotations

import math
from typing import Any, Optional

import torch
from torch import Tensor, nn

from sketchcore.torch.layers import _factors
from sketchcore.torch.ops import _eager, _memory_mode
from sketchcore.torch._common import ACTIVATIONS, keyword_hints, positive_int
from sketchcore.torch.ops._functional import _dropout_seed, run_sketched_linear
from sketchcore.torch.layers._layer_state import SketchedLayer, dense_copy

_is_compiling = torch.compiler.is_compiling


class LowRankLinear(SketchedLayer):
    """``y = dropout(activation(σ(x S) U + bias))``: a rank-``rank`` linear layer through
    sketchcore's fused sketched GEMM (bias, activation and dropout in the epilogue, backward in
    the core; ``dropout`` is applied in training mode only, like ``nn.Dropout`` after the layer).

    σ is ``inner_activation``, a bottleneck activation on the rank-wide intermediate (CoLA's
    layers for pretraining: ``inner_activation="silu"``; identity by default), fused into the
    core's first product; the backward keeps only the pre-activation x S and recomputes σ from
    it. With an inner activation the layer is no longer linear: it cannot be converted from or
    to ``nn.Linear`` (:meth:`from_linear`, :meth:`to_linear` and ``weight`` refuse).

    From scratch, S and U are drawn so that the output variance matches ``nn.Linear``'s
    (S uniform in ±1/√in, U uniform in ±√(3/rank)); :meth:`from_linear` converts a trained
    layer with its truncated SVD instead. ``weight`` is the dense equivalent, (out, in).

    Parameters
    ----------
    in_features, out_features : int
        Sizes of the input and output (≥ 1).
    rank : int
        Rank of S (in, rank) and U (rank, out) (≥ 1).
    bias : bool
        Whether the layer has a learnable bias.
    activation : {"none", "relu", "gelu", "gelu_tanh", "silu"}, optional
        None means ``"none"``.
    dtype, device : optional
        Of the parameters.
    dropout : float
        Inverted-dropout probability in [0, 1].
    inner_activation : {"none", "relu", "gelu", "gelu_tanh", "silu"}, optional
        σ on the intermediate x S; None means ``"none"``.

    Raises
    ------
    ValueError
        A size that is not an integer ≥ 1, an unknown ``activation`` or ``inner_activation``,
        ``dropout`` not a number in [0, 1].

    Examples
    --------
    >>> layer = LowRankLinear(64, 32, rank=4)
    >>> layer(torch.randn(5, 64)).shape, layer.S.shape, layer.U.shape
    (torch.Size([5, 32]), torch.Size([64, 4]), torch.Size([4, 32]))
    >>> LowRankLinear(64, 32, rank=16, inner_activation="silu")
    LowRankLinear(in_features=64, out_features=32, rank=16, bias=True, activation='none', inner_activation='silu')
    >>> LowRankLinear(64, 32, rank=4, dropout=2)
    Traceback (most recent call last):
    ValueError: LowRankLinear: dropout: expected a probability in [0, 1], got 2
    """

    @keyword_hints("LowRankLinear", {"low_rank": "rank"})
    def __init__(self, in_features: int, out_features: int, rank: int, bias: bool = True,
                 activation: Optional[str] = None, dtype: Optional[torch.dtype] = None,
                 device: Any = None, dropout: float = 0.0, inner_activation: Optional[str] = None) -> None:
        super().__init__()
        self.in_features = positive_int(in_features, "in_features", "LowRankLinear")
        self.out_features = positive_int(out_features, "out_features", "LowRankLinear")
        self.rank = positive_int(rank, "rank", "LowRankLinear")
        self.activation = activation or "none"
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"LowRankLinear: activation: expected one of {ACTIVATIONS} or None, got {activation!r}")
        self.inner_activation = inner_activation or "none"
        if self.inner_activation not in ACTIVATIONS:
            raise ValueError(f"LowRankLinear: inner_activation: expected one of {ACTIVATIONS} or None, "
                             f"got {inner_activation!r}")
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout <= 1.0:
            raise ValueError(f"LowRankLinear: dropout: expected a probability in [0, 1], got {dropout!r}")
        self.dropout = float(dropout)
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
                    activation: Optional[str] = None, dropout: float = 0.0) -> "LowRankLinear":
        """The best rank-``rank`` approximation of ``linear`` (truncated SVD, balanced factors);
        with ``tolerance`` instead, the smallest rank whose relative weight error
        ‖W − W_r‖_F / ‖W‖_F is at most ``tolerance``. Bias, dtype and device are kept;
        ``activation`` and ``dropout`` configure the new layer.

        Parameters
        ----------
        linear : nn.Linear
        rank : int, optional
            At most min(in, out).
        tolerance : float, optional
            Relative weight error in [0, 1).
        activation : str, optional
        dropout : float

        Returns
        -------
        LowRankLinear

        Raises
        ------
        ValueError
            Not exactly one of ``rank`` and ``tolerance``; ``tolerance`` outside [0, 1); ``rank``
            not an integer ≥ 1 or above min(in, out); as the constructor.

        Examples
        --------
        >>> dense = nn.Linear(64, 32)
        >>> full = LowRankLinear.from_linear(dense, rank=32)
        >>> x = torch.randn(5, 64)
        >>> torch.allclose(full(x), dense(x), atol=1e-5)
        True
        >>> LowRankLinear.from_linear(dense, rank=40)
        Traceback (most recent call last):
        ValueError: LowRankLinear.from_linear: rank: expected at most min(in, out) = 32, got 40
        """
        M = linear.weight.detach().t()
        if (rank is None) == (tolerance is None):
            raise ValueError("LowRankLinear.from_linear: expected exactly one of rank and tolerance, got "
                             f"rank={rank!r}, tolerance={tolerance!r}")
        if tolerance is not None:
            if not 0.0 <= tolerance < 1.0:
                raise ValueError(f"LowRankLinear.from_linear: tolerance: expected a number in [0, 1), got {tolerance!r}")
            rank, _ = _factors.rank_for_tolerance(M, tolerance)
        rank = positive_int(rank, "rank", "LowRankLinear.from_linear")
        if rank > min(M.shape):
            raise ValueError(f"LowRankLinear.from_linear: rank: expected at most min(in, out) = {min(M.shape)}, "
                             f"got {rank}")
        layer = cls(linear.in_features, linear.out_features, rank, bias=linear.bias is not None,
                    activation=activation, dtype=linear.weight.dtype, device=linear.weight.device, dropout=dropout)
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
        """The dense equivalent (out, in), as ``nn.Linear.weight``: a read-only
        :class:`~sketchcore.torch.DerivedWeight` (metadata free, the value computed from S and U
        on first use; writes and assignment raise).

        Returns
        -------
        DerivedWeight, shape (out_features, in_features)

        Raises
        ------
        RuntimeError
            An in-place write to the returned tensor.
        AttributeError
            Assigning ``layer.weight``.

        Examples
        --------
        >>> layer = LowRankLinear(64, 32, rank=4)
        >>> torch.allclose(layer.weight, (layer.S @ layer.U).t())
        True
        >>> layer.weight = nn.Parameter(torch.zeros(32, 64))
        Traceback (most recent call last):
        AttributeError: LowRankLinear.weight: expected no assignment ...
        """
        self._require_linear("weight")
        return self._derived_weight()

    def _require_linear(self, what: str) -> None:
        """Refuses the dense views of a layer that is not a linear map (an inner activation)."""
        if self.inner_activation != "none":
            raise ValueError(f"LowRankLinear.{what}: expected a linear layer (inner_activation 'none'), got "
                             f"inner_activation={self.inner_activation!r}: σ(x S) U has no dense weight")

    def _dense_weight(self) -> Tensor:
        return self.U.t() @ self.S.t()

    def _weight_sources(self) -> tuple[Tensor, ...]:
        return (self.S, self.U)

    def _weight_shape(self) -> tuple[int, ...]:
        return (self.out_features, self.in_features)

    def to_linear(self) -> nn.Linear:
        """An ``nn.Linear`` computing the same affine map (the activation is not included).

        Returns
        -------
        nn.Linear
            Of S's dtype and device; an editable dense copy.

        Raises
        ------
        Nothing.

        Examples
        --------
        >>> layer = LowRankLinear(64, 32, rank=4)
        >>> x = torch.randn(5, 64)
        >>> torch.allclose(layer.to_linear()(x), layer(x), atol=1e-5)
        True
        """
        self._require_linear("to_linear")
        return dense_copy(self, self.S)

    @torch.jit.unused
    def _run(self, x: Tensor) -> Tensor:
        """The forward through the one road (ops/_functional.run_sketched_linear; never compiled by
        TorchScript). The factors are read from the module's dictionary: see SKLinear._run."""
        params = self._parameters
        S, U, bias = params["S"], params["U"], params["bias"]
        p = self.dropout if self.training else 0.0
        y = run_sketched_linear(x, S, U, bias, self.activation, 1.0, p, None, self.inner_activation)
        if p == 0 and not _is_compiling() and isinstance(y.grad_fn, _eager.SketchedLinear._backward_cls) \
                and _memory_mode.active():  # only the eager road's node (dynamo cannot read grad_fn)
            # y is recomputable from the Z the fused op saved (not under autocast's cast of y)
            _memory_mode.register(y, y.grad_fn, U, bias, self.activation, self.inner_activation)
        return y

    def forward(self, x: Tensor) -> Tensor:
        if not torch.jit.is_scripting():
            return self._run(x)
        p = self.dropout if self.training else 0.0  # TorchScript: the operator directly
        y, _ = torch.ops.sketchcore.sketched_linear(x, self.S, self.U, self.bias, self.activation, 1.0, p,
                                                    _dropout_seed(None, p), self.inner_activation)
        return y

    def layer_config(self) -> dict[str, Any]:
        """The configuration, saved in the state_dict's metadata so that ``restore_model`` can
        rebuild the layer without the dense model; loading a state_dict saved with another
        configuration raises.

        Returns
        -------
        dict
            ``"sketchcore": "LowRankLinear"`` and the constructor's arguments.

        Raises
        ------
        Nothing.

        Examples
        --------
        >>> LowRankLinear(64, 32, rank=4).layer_config()  # doctest: +NORMALIZE_WHITESPACE
        {'sketchcore': 'LowRankLinear', 'in_features': 64, 'out_features': 32, 'rank': 4,
         'bias': True, 'activation': 'none', 'dropout': 0.0, 'inner_activation': 'none'}
        """
        return {"sketchcore": "LowRankLinear", "in_features": self.in_features, "out_features": self.out_features,
                "rank": self.rank, "bias": self.bias is not None, "activation": self.activation,
                "dropout": self.dropout, "inner_activation": self.inner_activation}

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, rank={self.rank}, "
                f"bias={self.bias is not None}, activation={self.activation!r}"
                + (f", dropout={self.dropout}" if self.dropout else "")
                + (f", inner_activation={self.inner_activation!r}" if self.inner_activation != "none" else ""))
