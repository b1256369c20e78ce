"""``SKLinear``: Panther's sketched linear layer over the differentiable functions."""
from __future__ import annotations

import math
import warnings
from typing import Any, Optional

import torch
from torch import Tensor, nn

from sketchcore import _ranks
from sketchcore.torch.layers import _factors
from sketchcore.torch._common import ACTIVATIONS, keyword_hints, positive_int
from sketchcore.torch.ops._functional import _dropout_seed, run_sklinear
from sketchcore.torch.layers._layer_state import SketchedLayer, dense_copy
from sketchcore.torch.ops._ops import _joined_in_place


class SKLinear(SketchedLayer):
    """A sketched linear layer with Panther's ``SKLinear`` math, initialisation and names:

        y = 1/(2T) · Σ_t [(x S1_t) U1_t + (x U2_t) S2_t] + b

    with learnable ``S1s`` (T, in, k), ``S2s`` (T, k, out) and ``bias``, and fixed buffers
    ``U1s`` (T, k, out), ``U2s`` (T, in, k) with entries ±1/√k (drawn with torch's RNG).
    ``init`` chooses the initialisation. ``"panther"`` (the default, for drop-in): from a dense
    weight W (``W_init``, shape (out, in) as in ``nn.Linear``), ``S1_t = Wᵀ U1_tᵀ``,
    ``S2_t = U2_tᵀ Wᵀ``; without ``W_init``, W is drawn like ``nn.Linear``'s weight with fan-in
    = in_features (Panther computes it on the wrong axis, which sketchcore does not reproduce).
    Its output has √(1 + (out − 1)/(2Tk)) times ``nn.Linear``'s scale, and as a conversion it is
    worse than outputting zero. ``"svd"``: U1s/U2s from singular subspaces of W, so the layer
    starts as W's best rank-2Tk approximation (the default of :meth:`from_linear`).
    ``"linear"`` (training from scratch, no ``W_init``): S1s and S2s drawn so that the output
    variance equals ``nn.Linear``'s.

    All 2T products run as one packed pair of GEMMs with fused bias, activation and
    dropout; inputs may have any leading shape and any strides (Panther's ``.view`` fails
    on non-contiguous inputs). Panther's warning (``WARNING_MSG_FC``) is issued under Panther's
    condition 2·T·k·(in + out) > in·out.

    Parameters
    ----------
    in_features, out_features : int
        Sizes of the input and output (≥ 1).
    num_terms : int
        T (≥ 1).
    low_rank : int
        k per term (≥ 1).
    W_init : Tensor, shape (out_features, in_features), optional
        Dense weight to start from (not with ``init="linear"``).
    bias : bool
        Whether the layer has a learnable bias.
    activation : {"none", "relu", "gelu", "gelu_tanh", "silu"}, optional
        Fused after the bias; None means ``"none"``.
    dropout : float
        Inverted-dropout probability in [0, 1], applied in training mode.
    dtype, device : optional
        Of the parameters and buffers.
    init : {"panther", "svd", "linear"}

    Raises
    ------
    ValueError
        An unknown ``init`` or ``activation``; a size that is not an integer ≥ 1; ``dropout``
        outside [0, 1]; ``W_init`` of the wrong shape; ``W_init`` with ``init="linear"``.

    Warns
    -----
    UserWarning
        ``WARNING_MSG_FC`` when 2·T·k·(in + out) > in·out.

    Examples
    --------
    >>> _ = torch.manual_seed(0)
    >>> layer = SKLinear(64, 32, num_terms=1, low_rank=4)
    >>> layer(torch.randn(5, 64)).shape
    torch.Size([5, 32])
    >>> layer.S1s.shape, layer.U1s.shape
    (torch.Size([1, 64, 4]), torch.Size([1, 4, 32]))
    >>> SKLinear(64, 32, num_terms=1, low_rank=0)
    Traceback (most recent call last):
    ValueError: SKLinear: low_rank: expected an integer ≥ 1, got 0
    """

    #: Panther's warning texts, so that code filtering Panther's warnings works unchanged. Only
    #: WARNING_MSG_FC is ever issued: sketchcore's CUDA GEMMs use tensor cores at any size and
    #: batch, so the conditions of the other two never arise.
    WARNING_MSG_TC = ("Tensor Core not utilized. Ensure 'in_features', 'out_features', "
                      "and 'low_rank' are multiples of 16 (current: {}, {}, {}).")
    WARNING_MSG_BATCH = "Batch size {} is not a multiple of 16. Tensor Core optimizations disabled."
    WARNING_MSG_FC = ("The sketching layer uses more parameters than a fully connected layer. "
                      "Consider reducing 'num_terms' or 'low_rank' for efficiency.")

    @keyword_hints("SKLinear", {"rank": "low_rank"})
    def __init__(self, in_features: int, out_features: int, num_terms: int, low_rank: int,
                 W_init: Optional[Tensor] = None, bias: bool = True, activation: Optional[str] = None,
                 dropout: float = 0.0, dtype=None, device=None, init: str = "panther"):
        super().__init__()
        if init not in ("panther", "svd", "linear"):
            raise ValueError(f"SKLinear: init: expected 'panther', 'svd' or 'linear', got {init!r}")
        self.init = init
        self.in_features = positive_int(in_features, "in_features", "SKLinear")
        self.out_features = positive_int(out_features, "out_features", "SKLinear")
        self.num_terms = positive_int(num_terms, "num_terms", "SKLinear")
        self.low_rank = positive_int(low_rank, "low_rank", "SKLinear")
        self.activation = activation or "none"
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"SKLinear: activation: expected one of {ACTIVATIONS} or None, got {activation!r}")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"SKLinear: dropout: expected a probability in [0, 1], got {dropout!r}")
        self.dropout = float(dropout)
        kwargs = {"dtype": dtype or torch.get_default_dtype(), "device": device}
        T, k, n_in, n_out = self.num_terms, self.low_rank, self.in_features, self.out_features
        stored = _ranks.factored_size(n_in, n_out, 2 * T * k)
        if stored > n_in * n_out:  # Panther's condition (factors and sketches counted)
            warnings.warn(f"{self.WARNING_MSG_FC} (SKLinear({n_in}, {n_out}, num_terms={T}, low_rank={k}): "
                          f"2·T·k·(in + out) = {stored} > in·out = {n_in * n_out})",
                          UserWarning, stacklevel=3)  # past keyword_hints' wrapper: the user's line
        if init == "linear" and W_init is not None:
            raise ValueError("SKLinear: init: 'linear' draws the factors for training from scratch; with W_init use "
                             "'svd' (accurate) or 'panther'")
        if W_init is None:
            W_init = torch.empty(n_out, n_in, **kwargs)
            nn.init.kaiming_uniform_(W_init, a=math.sqrt(5))  # nn.Linear's init; fan-in = in_features
        elif tuple(W_init.shape) != (n_out, n_in):
            raise ValueError(f"SKLinear: W_init: expected shape ({n_out}, {n_in}) (out_features, in_features), "
                             f"got {tuple(W_init.shape)}")
        if init == "svd":  # the best rank-2Tk approximation of W (see _factors.sklinear_factors)
            S1s, S2s, U1s, U2s = (f.to(**kwargs) for f in _factors.sklinear_factors(W_init.t(), T, k))
            self.register_buffer("U1s", U1s)
            self.register_buffer("U2s", U2s)
            self.S1s, self.S2s = nn.Parameter(S1s), nn.Parameter(S2s)
        else:  # random signs ±1/√k for the fixed factors, as Panther
            sign = 1.0 / math.sqrt(k)
            self.register_buffer("U1s", (torch.randint(0, 2, (T, k, n_out), device=device) * 2 - 1).to(kwargs["dtype"]) * sign)
            self.register_buffer("U2s", (torch.randint(0, 2, (T, n_in, k), device=device) * 2 - 1).to(kwargs["dtype"]) * sign)
            if init == "linear":  # Var(y) = in·σ²/(2T) = 1/3 = nn.Linear's, for σ² = 2T/(3·in)
                bound = math.sqrt(2 * T / n_in)
                self.S1s = nn.Parameter(torch.empty(T, n_in, k, **kwargs).uniform_(-bound, bound))
                self.S2s = nn.Parameter(torch.empty(T, k, n_out, **kwargs).uniform_(-bound, bound))
            else:  # Panther's: S1_t = W U1_tᵀ, S2_t = U2_tᵀ W (unbiased, not accurate; gain √(1 + (out−1)/(2Tk)))
                W = W_init.detach().to(**kwargs).t()  # (in, out)
                self.S1s = nn.Parameter(torch.stack([W @ self.U1s[t].t() for t in range(T)]))
                self.S2s = nn.Parameter(torch.stack([self.U2s[t].t() @ W for t in range(T)]))
        self._pack_factors()
        if bias:
            bound = 1 / math.sqrt(n_in)
            self.bias = nn.Parameter(torch.empty(n_out, **kwargs).uniform_(-bound, bound))
        else:
            self.register_parameter("bias", None)

    @classmethod
    def from_linear(cls, linear: nn.Linear, num_terms: int, low_rank: int, *, init: str = "svd",
                    **kwargs: Any) -> "SKLinear":
        """An SKLinear initialised from ``linear``'s weight and bias. ``init="svd"`` (the
        default for conversions) fixes U1s/U2s to singular subspaces of the weight, so the layer
        starts as its best rank-2·T·k approximation; ``init="panther"`` is Panther's unbiased
        random-sign initialisation, whose relative error ≈ √((d−1)/(2Tk)) is worse than zero
        until the layer has as many parameters as the dense one.

        Parameters
        ----------
        linear : nn.Linear
            Its dtype and device are kept.
        num_terms, low_rank : int
            T and k (≥ 1).
        init : {"svd", "panther", "linear"}
            ``"linear"`` is refused (it takes no weight).
        **kwargs
            ``activation``, ``dropout`` of the new layer.

        Returns
        -------
        SKLinear

        Raises
        ------
        ValueError
            As the constructor (sizes, ``init``, ``activation``, ``dropout``).

        Examples
        --------
        >>> _ = torch.manual_seed(0)
        >>> dense = nn.Linear(64, 32)
        >>> layer = SKLinear.from_linear(dense, num_terms=1, low_rank=4)
        >>> layer.init, layer.weight.shape
        ('svd', torch.Size([32, 64]))
        >>> SKLinear.from_linear(dense, 1, 4, init="bad")
        Traceback (most recent call last):
        ValueError: SKLinear: init: expected 'panther', 'svd' or 'linear', got 'bad'
        """
        layer = cls(linear.in_features, linear.out_features, num_terms, low_rank, W_init=linear.weight.detach(),
                    bias=linear.bias is not None, dtype=linear.weight.dtype, device=linear.weight.device,
                    init=init, **kwargs)
        if linear.bias is not None:
            with torch.no_grad():
                layer.bias.copy_(linear.bias)
        return layer

    def _pack_factors(self) -> None:
        """Stores [S1s; U2s] and [U1s; S2s] each in one contiguous block of memory (the
        parameters and buffers become contiguous views into it, so ``.view`` works on them as in
        Panther), and forward hands the core the two blocks without concatenating. The core packs
        the (2T, in, k) block into the in × 2Tk matrix it multiplies by (pooled, one pass over
        the small factor; an (in, 2T, k) layout would avoid that pass but made S1s and U2s
        non-contiguous, and measured no faster beyond noise). Called at construction and after
        every ``.to()``/``.double()``/...; where something else breaks the layout
        (``load_state_dict(assign=True)``), forward still works, with one concatenation per
        call."""
        T = self.num_terms
        with torch.no_grad():
            S = torch.cat([self.S1s, self.U2s])  # (2T, in, k), contiguous
            U = torch.cat([self.U1s, self.S2s])
        self.S1s.data, self._buffers["U2s"] = S[:T], S[T:]
        self._buffers["U1s"], self.S2s.data = U[:T], U[T:]

    def _apply(self, fn, *args, **kwargs):
        result = super()._apply(fn, *args, **kwargs)
        if any(type(t) not in (Tensor, nn.Parameter) for t in (self.S1s, self.S2s, self.U1s, self.U2s)):
            return result  # sharded (DTensor) factors, split by tensor parallelism: nothing to pack
        if _joined_in_place(self.S1s, self.U2s) and _joined_in_place(self.U1s, self.S2s):
            return result  # in-place moves such as share_memory_() keep the layout
        self._pack_factors()
        return result

    @torch.jit.unused
    def _run(self, x: Tensor, p: float) -> Tensor:
        """The forward through the one road (ops/_functional.run_sklinear; never compiled by
        TorchScript). The factors are read from the module's dictionaries, once: reading a
        parameter as an attribute goes through nn.Module.__getattr__ after a failed lookup that
        formats an AttributeError (about 0.25 µs each, a tenth of a tiny layer's forward for five
        of them)."""
        params, buffers = self._parameters, self._buffers
        return run_sklinear(x, params["S1s"], params["S2s"], buffers["U1s"], buffers["U2s"], params["bias"],
                            self.activation, float(p), None)

    def forward(self, x: Tensor) -> Tensor:
        p = self.dropout if self.training else 0.0
        if not torch.jit.is_scripting():
            return self._run(x, p)
        # TorchScript: the operator directly (the factors are consistent by construction)
        y, _ = torch.ops.sketchcore.sklinear(x, self.S1s, self.S2s, self.U1s, self.U2s, self.bias, self.activation, p,
                                             _dropout_seed(None, p))
        return y

    __jit_unused_properties__ = ["weight"]  # TorchScript compiles forward only

    @property
    def weight(self) -> Tensor:
        """The dense equivalent (out, in), as ``nn.Linear.weight``, for torch code that reads
        ``.weight``: a read-only :class:`~sketchcore.torch.DerivedWeight`. Metadata (shape, dtype,
        device) costs nothing; the value is computed from the factors on first use (2T products
        of in·k·out) and kept while you hold the tensor and the factors are unchanged; writes and
        assignment raise. Torch's fused fast paths see it and call this layer instead.

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
        >>> layer = SKLinear(64, 32, num_terms=1, low_rank=4)
        >>> w = layer.weight
        >>> type(w).__name__, w.shape
        ('DerivedWeight', torch.Size([32, 64]))
        >>> w.add_(1)
        Traceback (most recent call last):
        RuntimeError: SKLinear.weight: expected no write ...
        """
        return self._derived_weight()

    def _dense_weight(self) -> Tensor:
        W = torch.bmm(self.U1s.transpose(1, 2), self.S1s.transpose(1, 2)).sum(0)
        W = W + torch.bmm(self.S2s.transpose(1, 2), self.U2s.transpose(1, 2)).sum(0)
        return W / (2 * self.num_terms)

    def _weight_sources(self) -> tuple[Tensor, ...]:
        return (self.S1s, self.S2s, self.U1s, self.U2s)

    def _weight_shape(self) -> tuple[int, ...]:
        return (self.out_features, self.in_features)

    def to_linear(self) -> nn.Linear:
        """An ``nn.Linear`` computing the same affine map (the activation is not included).

        Returns
        -------
        nn.Linear
            Of the factors' dtype and device; an editable dense copy.

        Raises
        ------
        Nothing.

        Examples
        --------
        >>> layer = SKLinear(64, 32, num_terms=1, low_rank=4)
        >>> dense = layer.to_linear()
        >>> x = torch.randn(5, 64)
        >>> torch.allclose(dense(x), layer(x), atol=1e-5)
        True
        """
        return dense_copy(self, self.S1s)

    def layer_config(self) -> dict[str, Any]:
        """The configuration, saved in the state_dict's metadata (not as a key, so Panther's layer
        loads the state_dict) so that ``restore_model`` can rebuild the layer without the dense
        model; loading a state_dict saved with another configuration raises.

        Returns
        -------
        dict
            ``"sketchcore": "SKLinear"`` and the constructor's arguments.

        Raises
        ------
        Nothing.

        Examples
        --------
        >>> SKLinear(64, 32, num_terms=1, low_rank=4).layer_config()  # doctest: +NORMALIZE_WHITESPACE
        {'sketchcore': 'SKLinear', 'in_features': 64, 'out_features': 32, 'num_terms': 1,
         'low_rank': 4, 'bias': True, 'activation': 'none', 'dropout': 0.0, 'init': 'panther'}
        """
        return {"sketchcore": "SKLinear", "in_features": self.in_features, "out_features": self.out_features,
                "num_terms": self.num_terms, "low_rank": self.low_rank, "bias": self.bias is not None,
                "activation": self.activation, "dropout": self.dropout, "init": self.init}

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, num_terms={self.num_terms}, "
                f"low_rank={self.low_rank}, bias={self.bias is not None}, activation={self.activation!r}")
