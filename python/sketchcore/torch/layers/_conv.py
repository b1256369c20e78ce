"""``SKConv2d``: Panther's sketched convolution as two framework convolutions.

The layer is ``conv2d(x, S1s)`` (2T·k output channels) followed by the 1×1 combination of its
2T groups of k channels with the fixed ``U1s``, divided by 2T, plus bias. The first stage is
the framework's convolution (oneDNN on the CPU, cuDNN on CUDA); the second one GEMM over the
pixels: (out × 2Tk)·(2Tk × h·w) per image for NCHW on the CPU, a 1×1 cuDNN convolution with
the bias fused for NCHW on CUDA (faster than the batched GEMM, ``bench/gpu/conv_stage2.py``),
or (pixels × 2Tk)·(2Tk × out) with the bias fused for channels-last, whose output stays
channels-last: on the CPU the fastest of the alternatives measured for the second stage (a 1×1
convolution, Panther's ``bmm`` on U expanded to the batch; figures in
docs/performance_results.md). Memory formats, dilation, unbatched inputs, autocast, autograd and
torch.compile follow torch's own rules.

Why not the core's sketched GEMM over im2col patches: the patch matrix is nine times the input (3×3
kernels), and materialising it costs more than the whole convolution. An implicit-GEMM convolution in the core (patch blocks gathered into a
cache-sized pooled buffer per GEMM block) is the way to put the first stage on the core; until
then the framework's convolutions are the fastest engine available.
"""
from __future__ import annotations

import math
from typing import Any, Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from sketchcore.torch.layers import _factors
from sketchcore.torch.layers._layer_state import SketchedLayer
from sketchcore.torch._common import positive_int

IntPair = Union[int, tuple[int, int]]


def _pair(value: Any, name: str, minimum: int) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, int) and not isinstance(value, bool) else value
    if (not isinstance(pair, (tuple, list)) or len(pair) != 2
            or any(isinstance(v, bool) or not isinstance(v, int) or v < minimum for v in pair)):
        raise ValueError(f"SKConv2d: {name}: expected an integer ≥ {minimum} or a pair of them, got {value!r}")
    return int(pair[0]), int(pair[1])


def _padding(padding: Any, kernel_size: tuple[int, int], dilation: tuple[int, int]) -> tuple[int, int]:
    """Panther's rule: 'same' pads dilation·(k − 1)//2 on each side (torch's 'same' for odd
    kernels at stride 1), 'valid' pads nothing."""
    if isinstance(padding, str):
        if padding == "same":
            return tuple(d * (k - 1) // 2 for k, d in zip(kernel_size, dilation))  # type: ignore[return-value]
        if padding == "valid":
            return 0, 0
        raise ValueError(f"SKConv2d: padding: expected 'same', 'valid', an integer or a pair, got {padding!r}")
    return _pair(padding, "padding", 0)


def sketched_conv2d(x: Tensor, S1s: Tensor, U1s: Tensor, bias: Optional[Tensor] = None, *, stride: IntPair = 1,
                    padding: IntPair = 0, dilation: IntPair = 1) -> Tensor:
    """Differentiable ``conv2d(x, S1s)`` followed by the 1×1 combination of its 2T groups of k
    channels with ``U1s`` (2T, k, out), divided by 2T, plus ``bias``: Panther's sketched
    convolution. ``x`` is (N, C, H, W) or (C, H, W); ``S1s`` is (2T·k, C, kh, kw).

    Parameters
    ----------
    x : Tensor, shape (N, C, H, W) or (C, H, W)
    S1s : Tensor, shape (2T·k, C, kh, kw)
    U1s : Tensor, shape (2T, k, out)
    bias : Tensor, shape (out,), optional
    stride, padding, dilation : int or pair of int
        As ``torch.nn.functional.conv2d`` (stride, dilation ≥ 1; padding ≥ 0).

    Returns
    -------
    Tensor, shape (N, out, H', W') or (out, H', W')
        In ``x``'s memory format (channels-last in, channels-last out).

    Raises
    ------
    ValueError
        ``x`` not 3-D or 4-D; S1s/U1s shapes that do not match; a channel count other than
        ``S1s.shape[1]``; a bad stride, padding or dilation; an input smaller than the
        (dilated) kernel.

    Examples
    --------
    >>> S1s, U1s = torch.ones(4, 3, 3, 3), torch.ones(2, 2, 8)
    >>> sketched_conv2d(torch.ones(2, 3, 8, 8), S1s, U1s, padding=1).shape
    torch.Size([2, 8, 8, 8])
    >>> sketched_conv2d(torch.ones(2, 4, 8, 8), S1s, U1s)
    Traceback (most recent call last):
    ValueError: sketched_conv2d: x: expected 3 input channels (S1s.shape[1]), got 4 (shape (2, 4, 8, 8))
    """
    if x.dim() not in (3, 4):
        raise ValueError(f"sketched_conv2d: x: expected a (N, C, H, W) or (C, H, W) tensor, got shape {tuple(x.shape)}")
    if S1s.dim() != 4 or U1s.dim() != 3 or S1s.shape[0] != U1s.shape[0] * U1s.shape[1]:
        raise ValueError("sketched_conv2d: S1s, U1s: expected S1s (2T·k, C, kh, kw) and U1s (2T, k, out), got "
                         f"{tuple(S1s.shape)} and {tuple(U1s.shape)}")
    channels, height, width = x.shape[-3:]
    if channels != S1s.shape[1]:
        raise ValueError(f"sketched_conv2d: x: expected {S1s.shape[1]} input channels (S1s.shape[1]), "
                         f"got {channels} (shape {tuple(x.shape)})")
    stride_, padding_, dilation_ = _pair(stride, "stride", 1), _pair(padding, "padding", 0), _pair(dilation, "dilation", 1)
    kernel = (S1s.shape[2], S1s.shape[3])
    if any(size + 2 * p < d * (k - 1) + 1 for size, p, d, k in zip((height, width), padding_, dilation_, kernel)):
        raise ValueError(f"sketched_conv2d: x: a {height}×{width} input with padding {padding_} is smaller than the "
                         f"{kernel[0]}×{kernel[1]} kernel at dilation {dilation_}")
    terms, rank, out = U1s.shape
    z = F.conv2d(x if x.dim() == 4 else x.unsqueeze(0), S1s, None, stride_, padding_, dilation_)
    n, _, h, w = z.shape
    combine = U1s.reshape(terms * rank, out) / terms  # (2T·k, out)
    if z.is_contiguous(memory_format=torch.channels_last) and not z.is_contiguous():
        rows = z.permute(0, 2, 3, 1).reshape(-1, terms * rank)  # channels-last: pixels are rows, a view
        y = (torch.mm(rows, combine) if bias is None else torch.addmm(bias, rows, combine))
        y = y.view(n, h, w, out).permute(0, 3, 1, 2)
    elif z.is_cuda:  # NCHW on CUDA: a 1×1 cuDNN convolution with the bias fused
        y = F.conv2d(z, combine.t()[:, :, None, None], bias)
    else:  # NCHW on the CPU: (out × 2Tk) · (2Tk × h·w) per image
        y = torch.matmul(combine.t(), z.reshape(n, terms * rank, h * w))
        y = (y if bias is None else y + bias.to(y.dtype).view(1, out, 1)).view(n, out, h, w)
    if x.dim() == 3:
        return y.squeeze(0)
    # the input's memory format, as nn.Conv2d (the convolution may answer channels-last inputs in NCHW)
    channels_last = x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    return y.contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)


class SKConv2d(SketchedLayer):
    """A sketched 2-D convolution with Panther's ``SKConv2d`` math, names and initialisation:

        y = 1/(2T) Σ_l conv1x1(conv2d(x, S1s[l·k:(l+1)·k]), U1s[l]) + b

    with learnable ``S1s`` (2T·k, in, kh, kw) and ``bias``, and fixed ``U1s`` (2T, k, out).
    ``init="panther"`` (the default, for drop-in): U1s random signs ±1/√k and
    ``S1s[l] = W U1s[l]ᵀ`` from a dense kernel W (``layer``'s, else drawn like
    ``nn.Conv2d``'s); as a conversion its error is ≈ √((out − 1)/(2Tk)). ``init="svd"``: U1s
    from the right singular vectors of the kernel as a (in·kh·kw) × out matrix, so the layer
    starts as its best rank-2Tk approximation (the default of :meth:`fromTorch`).

    ``padding`` is ``"same"``, ``"valid"``, an integer or a pair; ``dilation`` is supported;
    ``groups`` other than 1 and padding modes other than zeros are refused. Runs as two
    framework convolutions (see the module docstring).

    Parameters
    ----------
    in_channels, out_channels : int
        ≥ 1.
    kernel_size, stride, dilation : int or pair of int
        ≥ 1.
    padding : {"same", "valid"} or int or pair of int
    bias : bool
    num_terms, low_rank : int
        T and k (≥ 1).
    layer : nn.Conv2d, optional
        Dense convolution of the same geometry to start from.
    dtype, device : optional
    init : {"panther", "svd"}

    Raises
    ------
    ValueError
        An unknown ``init``; a size, stride or dilation that is not an integer ≥ 1 (or a pair);
        a bad ``padding``; a ``layer`` of other geometry, with ``groups`` ≠ 1, a padding mode
        other than zeros or uneven ``"same"`` padding.
    TypeError
        ``layer`` is not an ``nn.Conv2d``.

    Examples
    --------
    >>> layer = SKConv2d(3, 8, kernel_size=3, padding="same", num_terms=1, low_rank=2)
    >>> layer(torch.randn(2, 3, 8, 8)).shape, layer.S1s.shape, layer.U1s.shape
    (torch.Size([2, 8, 8, 8]), torch.Size([4, 3, 3, 3]), torch.Size([2, 2, 8]))
    >>> SKConv2d(3, 8, padding="full")
    Traceback (most recent call last):
    ValueError: SKConv2d: padding: expected 'same', 'valid', an integer or a pair, got 'full'
    """

    S1s: nn.Parameter
    U1s: Tensor
    bias: Optional[nn.Parameter]

    def __init__(self, in_channels: int, out_channels: int, kernel_size: IntPair = (3, 3), stride: IntPair = (1, 1),
                 padding: Union[str, IntPair] = (1, 1), bias: bool = True, num_terms: int = 6, low_rank: int = 8,
                 layer: Optional[nn.Conv2d] = None, dtype=None, device=None, *, dilation: IntPair = 1,
                 init: str = "panther"):
        super().__init__()
        if init not in ("panther", "svd"):
            raise ValueError(f"SKConv2d: init: expected 'panther' or 'svd', got {init!r}")
        self.in_channels = positive_int(in_channels, "in_channels", "SKConv2d")
        self.out_channels = positive_int(out_channels, "out_channels", "SKConv2d")
        self.num_terms = positive_int(num_terms, "num_terms", "SKConv2d")
        self.low_rank = positive_int(low_rank, "low_rank", "SKConv2d")
        self.kernel_size = _pair(kernel_size, "kernel_size", 1)
        self.stride = _pair(stride, "stride", 1)
        self.dilation = _pair(dilation, "dilation", 1)
        self.padding = _padding(padding, self.kernel_size, self.dilation)
        kwargs = {"dtype": dtype or torch.get_default_dtype(), "device": device}
        kh, kw = self.kernel_size
        if layer is not None:
            _check_convertible(layer)
            if (layer.in_channels, layer.out_channels, layer.kernel_size) != (in_channels, out_channels,
                                                                              self.kernel_size):
                raise ValueError(f"SKConv2d: layer: expected a Conv2d({in_channels}, {out_channels}, "
                                 f"kernel_size={self.kernel_size}), got {layer}")
            W = layer.weight.detach().to(**kwargs)
        else:
            W = torch.empty(out_channels, in_channels, kh, kw, **kwargs)
            nn.init.kaiming_uniform_(W, a=math.sqrt(5))  # nn.Conv2d's init
        L, k = 2 * self.num_terms, self.low_rank
        M = W.reshape(out_channels, -1).t()  # (in·kh·kw) × out
        if init == "svd":
            S, U1s = (f.to(**kwargs) for f in _factors.skconv_factors(M, L, k))
        else:  # Panther's: S_l = M U_lᵀ with random signs ±1/√k
            U1s = (torch.randint(0, 2, (L, k, out_channels), device=device) * 2 - 1).to(kwargs["dtype"]) / math.sqrt(k)
            S = torch.stack([M @ U1s[t].t() for t in range(L)])  # (2T, in·kh·kw, k)
        self.register_buffer("U1s", U1s)
        self.S1s = nn.Parameter(S.transpose(1, 2).reshape(L * k, in_channels, kh, kw).contiguous())
        if not bias:
            self.register_parameter("bias", None)
        elif layer is not None and layer.bias is not None:
            self.bias = nn.Parameter(layer.bias.detach().to(**kwargs).clone())
        else:
            bound = 1 / math.sqrt(in_channels * kh * kw)
            self.bias = nn.Parameter(torch.empty(out_channels, **kwargs).uniform_(-bound, bound))

    @staticmethod
    def fromTorch(layer: nn.Conv2d, num_terms: int, low_rank: int, *, init: str = "svd") -> "SKConv2d":
        """An SKConv2d with ``layer``'s geometry, kernel and bias (Panther's name). ``init="svd"``
        (the default) starts at the kernel's best rank-2·T·k approximation; ``"panther"`` is
        Panther's random-sign initialisation.

        Parameters
        ----------
        layer : nn.Conv2d
            ``groups=1``, zero padding; its dtype and device are kept.
        num_terms, low_rank : int
            T and k (≥ 1).
        init : {"svd", "panther"}

        Returns
        -------
        SKConv2d

        Raises
        ------
        TypeError
            ``layer`` is not an ``nn.Conv2d``.
        ValueError
            ``groups`` ≠ 1, a padding mode other than zeros, uneven ``"same"`` padding; as the
            constructor.

        Examples
        --------
        >>> conv = nn.Conv2d(3, 8, 3, padding=1)
        >>> SKConv2d.fromTorch(conv, num_terms=1, low_rank=2).padding
        (1, 1)
        >>> SKConv2d.fromTorch(nn.Conv2d(4, 8, 3, groups=2), 1, 2)
        Traceback (most recent call last):
        ValueError: SKConv2d: layer: groups: expected 1 (grouped and depthwise convolutions are not sketched), got 2
        """
        _check_convertible(layer)
        return SKConv2d(layer.in_channels, layer.out_channels, layer.kernel_size, layer.stride,
                        layer.padding, layer.bias is not None, num_terms, low_rank, layer, layer.weight.dtype,
                        layer.weight.device, dilation=layer.dilation, init=init)

    def forward(self, x: Tensor) -> Tensor:
        return sketched_conv2d(x, self.S1s, self.U1s, self.bias, stride=self.stride, padding=self.padding,
                               dilation=self.dilation)

    __jit_unused_properties__ = ["weight"]

    @property
    def weight(self) -> Tensor:
        """The dense kernel (out, in, kh, kw) this layer computes, as ``nn.Conv2d.weight``: a
        read-only :class:`~sketchcore.torch.DerivedWeight` (metadata free, the value computed from
        S1s and U1s on first use; writes and assignment raise).

        Returns
        -------
        DerivedWeight, shape (out_channels, in_channels, kh, kw)

        Raises
        ------
        RuntimeError
            An in-place write to the returned tensor.
        AttributeError
            Assigning ``layer.weight``.

        Examples
        --------
        >>> layer = SKConv2d(3, 8, kernel_size=3, num_terms=1, low_rank=2)
        >>> layer.weight.shape
        torch.Size([8, 3, 3, 3])
        >>> layer.weight.zero_()
        Traceback (most recent call last):
        RuntimeError: SKConv2d.weight: expected no write ...
        """
        return self._derived_weight()

    def _dense_weight(self) -> Tensor:
        L, k = self.U1s.shape[:2]
        S = self.S1s.reshape(L, k, -1).transpose(1, 2)
        M = torch.bmm(S, self.U1s).sum(0) / L
        return M.t().reshape(self.out_channels, self.in_channels, *self.kernel_size)

    def _weight_sources(self) -> tuple[Tensor, ...]:
        return (self.S1s, self.U1s)

    def _weight_shape(self) -> tuple[int, ...]:
        return (self.out_channels, self.in_channels, *self.kernel_size)

    def to_conv2d(self) -> nn.Conv2d:
        """An ``nn.Conv2d`` computing the same map.

        Returns
        -------
        nn.Conv2d
            Of S1s's dtype and device; an editable dense copy.

        Raises
        ------
        Nothing.

        Examples
        --------
        >>> layer = SKConv2d(3, 8, kernel_size=3, num_terms=1, low_rank=2)
        >>> x = torch.randn(2, 3, 8, 8)
        >>> torch.allclose(layer.to_conv2d()(x), layer(x), atol=1e-5)
        True
        """
        conv = nn.Conv2d(self.in_channels, self.out_channels, self.kernel_size, self.stride, self.padding,
                         self.dilation, bias=self.bias is not None, dtype=self.S1s.dtype, device=self.S1s.device)
        with torch.no_grad():
            conv.weight.copy_(self.weight)
            if self.bias is not None:
                conv.bias.copy_(self.bias)
        return conv

    def layer_config(self) -> dict[str, Any]:
        """The configuration, saved in the state_dict's metadata (for ``restore_model``); loading
        a state_dict saved with another configuration raises.

        Returns
        -------
        dict
            ``"sketchcore": "SKConv2d"`` and the constructor's arguments.

        Raises
        ------
        Nothing.

        Examples
        --------
        >>> SKConv2d(3, 8, num_terms=1, low_rank=2).layer_config()["kernel_size"]
        (3, 3)
        """
        return {"sketchcore": "SKConv2d", "in_channels": self.in_channels, "out_channels": self.out_channels,
                "kernel_size": self.kernel_size, "stride": self.stride, "padding": self.padding,
                "dilation": self.dilation, "num_terms": self.num_terms, "low_rank": self.low_rank,
                "bias": self.bias is not None}

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, dilation={self.dilation}, num_terms={self.num_terms}, "
                f"low_rank={self.low_rank}, bias={self.bias is not None}")


def _check_convertible(layer: Any) -> None:
    if not isinstance(layer, nn.Conv2d):
        raise TypeError(f"SKConv2d: layer: expected a torch.nn.Conv2d, got {type(layer).__name__}")
    if layer.groups != 1:
        raise ValueError(f"SKConv2d: layer: groups: expected 1 (grouped and depthwise convolutions are not "
                         f"sketched), got {layer.groups}")
    if layer.padding_mode != "zeros":
        raise ValueError(f"SKConv2d: layer: padding_mode: expected 'zeros', got {layer.padding_mode!r}")
    if layer.padding == "same" and any(d * (k - 1) % 2 for k, d in zip(layer.kernel_size, layer.dilation)):
        raise ValueError(f"SKConv2d: layer: padding: 'same' with kernel_size {layer.kernel_size} and dilation "
                         f"{layer.dilation} pads unevenly in torch; expected symmetric padding")
