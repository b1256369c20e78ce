"""``RandMultiHeadAttention``: Panther's Performer (FAVOR+) attention, in time and memory
linear in the sequence length, exactly causal, with dropout honoured and reproducible features.

Per head (d = head dim, m = features, W the (m, d) orthogonal random features):

* softmax kernel, Panther's positive features: x' = x·d^(-1/4),
  φ(x) = m^(-1/2)·(exp(x'Wᵀ − |x'|²/2 − c) + 1e-5), with c the maximum of x'Wᵀ over the
  features for queries, and for keys Panther's maximum over features *and sequence* (a
  constant per batch and head), except in causal mode, where that maximum would let later
  tokens change earlier outputs: keys there have no additive 1e-5, so any constant c shared by
  the keys of a query cancels in the ratio below, and c is the running maximum of the keys'
  exponents up to that query (data-dependent, never from a later token; a fixed bound such as
  max_i |W_i|²/2 underflowed every key in float32 from head dimension 128 on);
* relu kernel: φ(x) = relu(m^(-1/2)·x Wᵀ) + 1e-5;
* out_i = Σ_j (φ(q_i)·φ(k_j)) v_j / Σ_j φ(q_i)·φ(k_j), over all j, or over j ≤ i when causal.

The computation is sketchcore's Performer kernels (:func:`sketchcore.performer_attention`, through
the custom operator of :mod:`sketchcore.torch.ops._performer`): the features are formed block by block
inside the kernels, never as L × m tensors. Non-causal: φ(K)ᵀ[V 1] is reduced once per head (the
keys' maximum kept as a running constant), then each block of queries is multiplied by it.
Causal: chunks with a running state and an exact masked product inside each chunk, so no output
sees a later token (masked products are exact zeros). Memory is linear in the sequence length;
the backward recomputes the features instead of keeping them.

Dropout (training only) removes whole keys from the numerator, per batch, head and key and
shared by all queries (the form attention dropout takes when the attention matrix is never
formed), rescaled by 1/(1 − p); the normaliser keeps every key, so the expected output is the
output without dropout. Panther ignores ``dropout``.

The random features W are orthogonal Gaussian blocks (QR of d × d Gaussian blocks, rows scaled
by the norms of independent Gaussian rows) drawn from sketchcore's counter-based Gaussian
sketches: a pure function of ``seed``, without touching torch's global RNG (Panther calls
``torch.manual_seed`` on every construction).

``reference_attention`` (:mod:`sketchcore.torch.ops._performer_formulas`) is the same math in composite
torch operations: the second-order gradients' path, and what runs on CUDA tensors while the fused
CUDA kernels are the closed gated path ``cuda_performer_kernels`` (the default until they pass on a
GPU; :func:`sketchcore.gated_paths`), and for causal softmax below float64 on CUDA in any case.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from sketchcore import sketch
from sketchcore.torch.layers._layer_state import SketchedLayer
from sketchcore.torch.ops._performer import performer_attention
from sketchcore.torch._common import positive_int

_KERNELS = ("softmax", "relu")


def orthogonal_features(num_features: int, dim: int, seed: int, *, dtype=None, device=None) -> Tensor:
    """(num_features, dim) FAVOR+ features: ⌈m/d⌉ orthogonal d × d blocks (Q of the QR of a
    Gaussian block, rows kept), each row scaled by the norm of an independent N(0, I_d) row,
    so rows have the norms of Gaussian rows and are exactly orthogonal within a block. All
    Gaussians come from ``sketchcore.sketch.gaussian(..., seed=seed)``, in float64."""
    blocks = -(-num_features // dim)
    gaussians = sketch.gaussian(blocks * dim + num_features, dim, seed=seed, scale=False).to_dense(
        like=torch.empty(0, dtype=torch.float64))
    W = torch.cat([torch.linalg.qr(gaussians[b * dim:(b + 1) * dim])[0].t() for b in range(blocks)])[:num_features]
    norms = torch.linalg.vector_norm(gaussians[blocks * dim:], dim=1)
    return (W * norms[:, None]).to(dtype=dtype or torch.get_default_dtype(), device=device)


def _kept_keys(key_padding_mask: Tensor, shape: tuple[int, ...]) -> Tensor:
    """1 for the keys to attend to, 0 for those ``key_padding_mask`` (bool True, or −inf) ignores."""
    if tuple(key_padding_mask.shape) != tuple(shape):
        raise ValueError(f"RandMultiHeadAttention: key_padding_mask: expected shape {tuple(shape)} (B, S), got "
                         f"{tuple(key_padding_mask.shape)}")
    if key_padding_mask.dtype == torch.bool:
        return ~key_padding_mask
    ignored = torch.isneginf(key_padding_mask)
    if not bool((key_padding_mask[~ignored] == 0).all()):
        raise ValueError("RandMultiHeadAttention: key_padding_mask: expected a bool mask or a float one of 0 and −inf "
                         "(Performer attention cannot add other values to scores it never forms)")
    return ~ignored


class RandMultiHeadAttention(SketchedLayer):
    """Performer attention with Panther's ``RandMultiHeadAttention`` API and parameters
    (``Wq``, ``Wk``, ``Wv``, ``W0`` (embed, embed), biases ``bq``, ``bk``, ``bv``, ``b0``; the
    buffer ``projection_matrix`` (m, head_dim)). ``forward(query, key, value)`` takes
    batch-first (B, L, embed) tensors and returns ``(output, None)`` like Panther. See the
    module docstring for the kernels, causality, dropout and the features (``seed``, default
    0, chooses them; Panther's ``SRPE`` argument is not supported).

    Parameters
    ----------
    embed_dim : int
        Model width E; a multiple of ``num_heads``.
    num_heads : int
    num_random_features : int
        m, the number of random features per head: time and memory grow with it, the error
        against exact softmax attention falls with it.
    dropout : float, default 0.0
        In [0, 1): drops whole keys from the numerator during training (see above).
    bias : bool, default True
        Biases on the four projections.
    kernel_fn : {"softmax", "relu"}
        FAVOR+'s positive softmax features, or relu features.
    iscausal : bool, default False
        Each query attends to itself and earlier tokens only, exactly.
    device, dtype : optional
        Of the parameters.
    seed : int, default 0
        Chooses the random features (≥ 0); torch's global RNG is not touched.

    Raises
    ------
    ValueError
        ``embed_dim`` not a multiple of ``num_heads``, ``dropout`` outside [0, 1), an unknown
        ``kernel_fn``, non-bool ``iscausal``/``bias``, a negative ``seed``; in ``forward``,
        inputs of the wrong shape, an unsupported ``attention_mask``/``attn_mask``, or a
        ``key_padding_mask`` of the wrong shape or values.

    Examples
    --------
    >>> import torch
    >>> from sketchcore.torch import RandMultiHeadAttention
    >>> attention = RandMultiHeadAttention(32, num_heads=4, num_random_features=64, iscausal=True)
    >>> x = torch.randn(2, 10, 32)                      # (B, L, E)
    >>> out, weights = attention(x, x, x)
    >>> out.shape, weights
    (torch.Size([2, 10, 32]), None)
    """

    Wq: nn.Parameter
    Wk: nn.Parameter
    Wv: nn.Parameter
    W0: nn.Parameter
    bq: Optional[nn.Parameter]
    bk: Optional[nn.Parameter]
    bv: Optional[nn.Parameter]
    b0: Optional[nn.Parameter]
    projection_matrix: Tensor
    #: The layout of inputs and outputs: True (Panther's, the default) (B, L, E); False (L, B, E),
    #: set by make_performer from an ``nn.MultiheadAttention(batch_first=False)``.
    batch_first: bool = True
    #: There is no packed in-projection. ``nn.TransformerEncoderLayer`` reads this to decide its
    #: fused exact-attention fast path; None makes it call this module instead.
    in_proj_bias: None = None

    def __init__(self, embed_dim: int, num_heads: int, num_random_features: int, dropout: float = 0.0,
                 bias: bool = True, kernel_fn: str = "softmax", iscausal: bool = False, device=None, dtype=None,
                 *, seed: int = 0):
        super().__init__()
        self.embed_dim = positive_int(embed_dim, "embed_dim", "RandMultiHeadAttention")
        self.num_heads = positive_int(num_heads, "num_heads", "RandMultiHeadAttention")
        self.num_random_features = positive_int(num_random_features, "num_random_features", "RandMultiHeadAttention")
        if embed_dim % num_heads:
            raise ValueError(f"RandMultiHeadAttention: embed_dim: expected a multiple of num_heads = {num_heads}, "
                             f"got {embed_dim}")
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
            raise ValueError(f"RandMultiHeadAttention: dropout: expected a probability in [0, 1), got {dropout!r}")
        if kernel_fn not in _KERNELS:
            raise ValueError(f"RandMultiHeadAttention: kernel_fn: expected 'softmax' or 'relu', got {kernel_fn!r}")
        if not isinstance(iscausal, bool) or not isinstance(bias, bool):
            raise ValueError(f"RandMultiHeadAttention: iscausal, bias: expected bools, got {iscausal!r}, {bias!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"RandMultiHeadAttention: seed: expected an integer ≥ 0, got {seed!r}")
        self.dropout, self.bias, self.kernel_fn, self.causal, self.seed = float(dropout), bias, kernel_fn, iscausal, seed
        kwargs = {"dtype": dtype or torch.get_default_dtype(), "device": device}
        for name in ("Wq", "Wk", "Wv", "W0"):
            weight = nn.Parameter(torch.empty(embed_dim, embed_dim, **kwargs))
            nn.init.xavier_uniform_(weight)
            setattr(self, name, weight)
        for name in ("bq", "bk", "bv", "b0"):
            setattr(self, name, nn.Parameter(torch.zeros(embed_dim, **kwargs)) if bias else None)
        self.register_buffer("projection_matrix", orthogonal_features(num_random_features, embed_dim // num_heads,
                                                                      seed, **kwargs))

    def forward(self, query: Tensor, key: Tensor, value: Tensor, attention_mask: Optional[Tensor] = None, *,
                key_padding_mask: Optional[Tensor] = None, need_weights: bool = False,
                attn_mask: Optional[Tensor] = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[Tensor, None]:
        """Attention of ``query`` over ``key``/``value``: ``(output, None)``. Besides Panther's
        arguments it takes ``nn.MultiheadAttention``'s keywords, so that it can replace one
        (``sketch_model(..., attention=m)``): ``key_padding_mask`` (B, S), True or −inf where a
        key is ignored, is applied exactly; ``attn_mask`` only as the causal mask, and it (or
        ``is_causal=True``) makes this call causal; the attention weights are never formed,
        so ``need_weights``/``average_attn_weights`` change nothing and None stands in for them.

        Parameters
        ----------
        query : Tensor, shape (B, L, E)
            (L, B, E) when ``batch_first`` is False.
        key, value : Tensor, shape (B, S, E)
            S = L for causal attention.
        attention_mask : None
            Panther's argument; only None is supported.
        key_padding_mask : Tensor, shape (B, S), optional
            Bool (True = ignore) or float (−inf = ignore, 0 = keep).
        need_weights, average_attn_weights : bool
            Accepted for ``nn.MultiheadAttention`` compatibility; no weights are formed.
        attn_mask : Tensor, optional
            Only a causal mask (bool upper triangle or −inf above the diagonal).
        is_causal : bool, default False
            Makes this call causal.

        Returns
        -------
        (Tensor, None)
            The output, shaped like ``query``, and None for the attention weights.

        Raises
        ------
        ValueError
            Inputs whose shapes do not fit ``embed_dim`` or each other, an ``attention_mask``,
            an ``attn_mask`` that is not causal, a ``key_padding_mask`` of the wrong shape or
            values, or causal attention with a different number of keys and queries.

        Examples
        --------
        >>> import torch
        >>> from sketchcore.torch import RandMultiHeadAttention
        >>> attention = RandMultiHeadAttention(16, 2, num_random_features=32, kernel_fn="relu")
        >>> q, kv = torch.randn(3, 5, 16), torch.randn(3, 7, 16)
        >>> padding = torch.zeros(3, 7, dtype=torch.bool)
        >>> padding[:, -2:] = True                       # ignore the last two keys
        >>> out, _ = attention(q, kv, kv, key_padding_mask=padding)
        >>> torch.allclose(out, attention(q, kv[:, :5], kv[:, :5])[0], atol=1e-5)
        True
        """
        if attention_mask is not None:
            raise ValueError("RandMultiHeadAttention: attention_mask: not supported (expected None); "
                             "use iscausal=True or a causal attn_mask for causal attention")
        if not self.batch_first:  # nn.MultiheadAttention's (L, B, E) layout
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        self._check_shapes(query, key, value)
        causal = self.causal or self._causal_mask(attn_mask, is_causal, query.shape[1])
        if causal and key.shape[1] != query.shape[1]:
            raise ValueError(f"RandMultiHeadAttention: key: causal attention needs as many keys as queries, got "
                             f"{key.shape[1]} keys for {query.shape[1]} queries")
        B, L, E = query.shape
        H, d = self.num_heads, E // self.num_heads

        def heads(x: Tensor, W: Tensor, b: Optional[Tensor]) -> Tensor:
            return F.linear(x, W, b).view(B, x.shape[1], H, d).transpose(1, 2)  # (B, H, L, d)

        q, k, v = heads(query, self.Wq, self.bq), heads(key, self.Wk, self.bk), heads(value, self.Wv, self.bv)
        compute = torch.promote_types(q.dtype, torch.float32)  # the kernels' arithmetic (16-bit inputs widened)
        key_weights = value_weights = None
        if key_padding_mask is not None:
            key_weights = _kept_keys(key_padding_mask, key.shape[:2]).to(device=q.device, dtype=compute)
        if self.training and self.dropout > 0.0:
            # Drawn as before the kernels (shape, dtype, device): the same torch RNG state gives the same keys.
            keep = torch.empty(*v.shape[:-1], 1, dtype=compute, device=v.device).bernoulli_(1.0 - self.dropout)
            value_weights = (keep / (1.0 - self.dropout))[..., 0]
        out = performer_attention(q, k, v, self.projection_matrix, kernel=self.kernel_fn, causal=causal,
                                  key_weights=key_weights, value_weights=value_weights)
        out = F.linear(out.transpose(1, 2).reshape(B, L, E).to(query.dtype), self.W0, self.b0)
        return (out if self.batch_first else out.transpose(0, 1)), None

    def _check_shapes(self, query: Tensor, key: Tensor, value: Tensor) -> None:
        layout = "(B, L" if self.batch_first else "(L, B"
        for name, t in (("query", query), ("key", key), ("value", value)):
            if t.dim() != 3 or t.shape[-1] != self.embed_dim:
                shape = tuple(t.shape) if self.batch_first else tuple(t.transpose(0, 1).shape)
                raise ValueError(f"RandMultiHeadAttention: {name}: expected a {layout}, {self.embed_dim}) tensor, "
                                 f"got shape {shape}")
        if key.shape[:2] != value.shape[:2] or key.shape[0] != query.shape[0]:
            raise ValueError(f"RandMultiHeadAttention: key, value: expected the same (B, S) as each other and "
                             f"query's B, got {tuple(key.shape)}, {tuple(value.shape)} for query {tuple(query.shape)}")

    @staticmethod
    def _causal_mask(attn_mask: Optional[Tensor], is_causal: bool, length: int) -> bool:
        """Whether a call's mask asks for causal attention; any other mask is refused."""
        if attn_mask is None:
            return is_causal
        if is_causal:  # torch's hint: attn_mask is the causal mask
            return True
        above = torch.ones(length, length, dtype=torch.bool, device=attn_mask.device).triu(1)
        masked = attn_mask if attn_mask.dtype == torch.bool else torch.isneginf(attn_mask)
        finite_zero = attn_mask.dtype == torch.bool or bool((attn_mask[~above] == 0).all())
        if attn_mask.shape != (length, length) or not torch.equal(masked, above) or not finite_zero:
            raise ValueError(f"RandMultiHeadAttention: attn_mask: expected None or the causal ({length}, {length}) "
                             f"mask (Performer attention forms no score matrix to mask), got a {attn_mask.dtype} "
                             f"mask of shape {tuple(attn_mask.shape)} that is not causal")
        return True

    def layer_config(self) -> dict[str, Any]:
        """The configuration, saved in the state_dict's metadata (for ``restore_model``); loading
        a state_dict saved with another configuration raises."""
        return {"sketchcore": "RandMultiHeadAttention", "embed_dim": self.embed_dim, "num_heads": self.num_heads,
                "num_random_features": self.num_random_features, "bias": self.bias, "kernel_fn": self.kernel_fn,
                "iscausal": self.causal, "dropout": self.dropout, "seed": self.seed, "batch_first": self.batch_first}

    def extra_repr(self) -> str:
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
                f"num_random_features={self.num_random_features}, kernel_fn={self.kernel_fn!r}, "
                f"iscausal={self.causal}, dropout={self.dropout}, seed={self.seed}")


def make_performer(mha: nn.MultiheadAttention, num_random_features: int, kernel_fn: str = "softmax",
                   iscausal: bool = False, *, seed: int = 0) -> RandMultiHeadAttention:
    """A :class:`RandMultiHeadAttention` with ``mha``'s projections, biases and dropout (copied,
    not shared) and layout (``batch_first``). Panther's name and arguments. ``mha`` must
    project q, k and v from the same embedding size (``kdim == vdim == embed_dim``).

    Parameters
    ----------
    mha : torch.nn.MultiheadAttention
        The attention to replace; it is not modified.
    num_random_features : int
        Random features per head.
    kernel_fn : {"softmax", "relu"}
    iscausal : bool, default False
    seed : int, default 0
        Chooses the random features.

    Returns
    -------
    RandMultiHeadAttention
        On ``mha``'s device and dtype.

    Raises
    ------
    TypeError
        ``mha`` is not an ``nn.MultiheadAttention``.
    ValueError
        ``kdim``/``vdim`` different from ``embed_dim``, ``add_bias_kv=True``, or arguments
        :class:`RandMultiHeadAttention` refuses.

    Examples
    --------
    >>> import torch
    >>> from sketchcore.torch import make_performer
    >>> mha = torch.nn.MultiheadAttention(32, 4, batch_first=True)
    >>> performer = make_performer(mha, num_random_features=256, kernel_fn="softmax")
    >>> x = torch.randn(2, 16, 32)
    >>> exact, _ = mha(x, x, x)
    >>> approx, _ = performer(x, x, x)
    >>> approx.shape == exact.shape
    True
    """
    if not isinstance(mha, nn.MultiheadAttention):
        raise TypeError(f"make_performer: mha: expected a torch.nn.MultiheadAttention, got {type(mha).__name__}")
    if not mha._qkv_same_embed_dim:
        raise ValueError(f"make_performer: mha: expected kdim == vdim == embed_dim = {mha.embed_dim}, got kdim = "
                         f"{mha.kdim}, vdim = {mha.vdim}")
    if mha.bias_k is not None:
        raise ValueError("make_performer: mha: add_bias_kv=True is not supported (expected False)")
    E = mha.embed_dim
    weight = mha.in_proj_weight.detach()
    performer = RandMultiHeadAttention(E, mha.num_heads, num_random_features, mha.dropout,
                                       mha.in_proj_bias is not None, kernel_fn, iscausal, weight.device, weight.dtype,
                                       seed=seed)
    performer.batch_first = mha.batch_first
    with torch.no_grad():
        for i, name in enumerate(("Wq", "Wk", "Wv")):
            getattr(performer, name).copy_(weight[i * E:(i + 1) * E])
            if mha.in_proj_bias is not None:
                getattr(performer, "b" + name[1]).copy_(mha.in_proj_bias[i * E:(i + 1) * E])
        performer.W0.copy_(mha.out_proj.weight)
        if mha.out_proj.bias is not None and performer.b0 is not None:
            performer.b0.copy_(mha.out_proj.bias)
    return performer
