"""What ``sketch_model`` was asked to do, validated once: a frozen :class:`ConversionPlan` that
knows which layers it matches and chooses each layer's rank. The handlers read it; nothing
reads back from them."""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Optional

from sketchcore import _ranks
from sketchcore.torch.compress._pretraining import check_pretraining_options
from sketchcore.torch.compress._quantize import Int8Config, check_quantize_config


def _is_count(value: Any) -> bool:
    """An int ≥ 1 that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def per_rank(layer: str, n_in: int, n_out: int, num_terms: Optional[int]) -> int:
    """Learnable parameters per unit of rank (per unit of k for SKLinear/SKConv2d)."""
    if layer == "skconv2d":  # the learnable S (2T blocks of in × k); the U1s are fixed sketches
        assert num_terms is not None
        return 2 * num_terms * n_in
    return _ranks.factored_size(n_in, n_out, 1 if layer == "lowrank" else num_terms)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ConversionPlan:
    """sketch_model's arguments after validation (see :func:`sketch_model` for each one).

    ``layer_options`` are the keyword arguments of every new linear layer (``activation``,
    ``dropout``, ``inner_activation``); ``calibrated`` says whether calibration inputs were
    given (the batches themselves are data, not part of the plan). ``quantize`` is the weight
    quantization applied after conversion (None: none)."""

    layer: str  #: "sklinear" or "lowrank"
    num_terms: Optional[int]
    low_rank: Optional[int]
    tolerance: Optional[float]
    param_ratio: Optional[float]
    include: Optional[tuple[str, ...]]
    exclude: tuple[str, ...]
    init: str
    conv2d: bool
    attention: Optional[int]
    tied: str
    calibrated: bool
    layer_options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    quantize: Optional[str] = None
    #: "uniform" (each layer sized alone) or "global" (one budget over all calibrated layers)
    allocation: str = "uniform"
    #: with allocation="global": the budget as a ratio of the layers' float32 bytes
    bytes_ratio: Optional[float] = None

    @classmethod
    def of(cls, *, num_terms: Optional[int] = None, low_rank: Optional[int] = None, tolerance: Optional[float] = None,
           param_ratio: Optional[float] = None, layer: Optional[str] = None, include: Optional[Iterable[str]] = None,
           exclude: Optional[Iterable[str]] = None, init: str = "svd", conv2d: bool = False,
           attention: Optional[int] = None, calibrated: bool = False, tied: str = "keep",
           inner_activation: Optional[str] = None, layer_options: Optional[Mapping[str, Any]] = None,
           quantize: Optional[object] = None, allocation: str = "uniform",
           bytes_ratio: Optional[float] = None) -> ConversionPlan:
        """The plan of a ``sketch_model`` call (the same defaults); raises sketch_model's ValueErrors."""
        sizes = sum(v is not None for v in (low_rank, tolerance, param_ratio, bytes_ratio))
        attention_only = sizes == 0 and attention is not None and not conv2d
        if sizes != 1 and not attention_only:
            raise ValueError("sketch_model: expected exactly one of low_rank, tolerance, param_ratio and bytes_ratio "
                             f"(or none with only attention=), got low_rank={low_rank!r}, tolerance={tolerance!r}, "
                             f"param_ratio={param_ratio!r}, bytes_ratio={bytes_ratio!r}")
        if layer is None:
            layer = "sklinear" if num_terms is not None or conv2d else "lowrank"
        if layer not in ("sklinear", "lowrank"):
            raise ValueError(f"sketch_model: layer: expected 'sklinear' or 'lowrank', got {layer!r}")
        if not attention_only and layer == "sklinear" and not _is_count(num_terms):
            raise ValueError(f"sketch_model: num_terms: expected an integer ≥ 1 for layer='sklinear', got {num_terms!r}")
        if attention is not None and not _is_count(attention):
            raise ValueError(f"sketch_model: attention: expected a number of random features ≥ 1, got {attention!r}")
        if conv2d and layer != "sklinear":
            raise ValueError(f"sketch_model: conv2d: convolutions become SKConv2d, which needs layer='sklinear', "
                             f"got layer={layer!r}")
        if tolerance is not None and not 0.0 <= tolerance < 1.0:
            raise ValueError(f"sketch_model: tolerance: expected a number in [0, 1), got {tolerance!r}")
        if param_ratio is not None and not 0.0 < param_ratio <= 1.0:
            raise ValueError(f"sketch_model: param_ratio: expected a number in (0, 1] (new parameters / dense "
                             f"parameters; above 1 the model would grow), got {param_ratio!r}")
        if tied not in ("keep", "untie"):
            raise ValueError(f"sketch_model: tied: expected 'keep' or 'untie', got {tied!r}")
        check_pretraining_options(layer, init, inner_activation, calibrated)
        if quantize is not None:
            quantize = _checked_quantize(quantize)
        _check_allocation(allocation, bytes_ratio, param_ratio, layer, init, calibrated, quantize)
        options = dict(layer_options or {})
        if inner_activation is not None:
            options["inner_activation"] = inner_activation
        return cls(layer, num_terms, low_rank, tolerance, param_ratio,
                   tuple(include) if include is not None else None, tuple(exclude or ()), init, conv2d, attention,
                   tied, calibrated, MappingProxyType(options), quantize, allocation, bytes_ratio)

    @property
    def attention_only(self) -> bool:
        """Only attention is converted (no size was given)."""
        return self.low_rank is None and self.tolerance is None and self.param_ratio is None and self.bytes_ratio is None

    def matches(self, name: str) -> bool:
        """Whether the module called ``name`` matches ``include`` and none of ``exclude``."""
        if self.include is not None and not any(fnmatch.fnmatchcase(name, p) for p in self.include):
            return False
        return not any(fnmatch.fnmatchcase(name, p) for p in self.exclude)

    def rank(self, n_in: int, n_out: int, layer: str, needed: Optional[int] = None) -> tuple[int, str]:
        """The rank (k per term for SKLinear/SKConv2d) of a ``layer`` ("lowrank", "sklinear" or
        "skconv2d") of fan-in ``n_in`` and fan-out ``n_out`` and, when it should stay dense, the
        reason. ``needed``: the smallest total rank meeting the tolerance (from the weight's or
        the whitened singular values), given when sizing by tolerance.

        A rank the user fixes (``low_rank``) is kept as given; a chosen one follows
        :mod:`sketchcore._ranks` (multiples of 64 from 256, else of 16): rounded down within the
        ``param_ratio`` budget, rounded up to meet the tolerance while the layer stays smaller
        than dense."""
        if self.low_rank is not None:
            return self.low_rank, ""
        dense = n_in * n_out
        unit = per_rank(layer, n_in, n_out, self.num_terms)
        if self.param_ratio is not None:
            full = min(n_in, n_out) if layer == "lowrank" else dense  # a LowRankLinear is full rank at min(in, out)
            rank = _ranks.aligned_rank_within(min(int(self.param_ratio * dense // unit), full))
            return (rank, "") if rank >= 1 else (0, f"no rank ≥ 1 fits param_ratio={self.param_ratio}")
        assert needed is not None, "sizing by tolerance needs the rank that meets it"
        if layer in ("sklinear", "skconv2d"):
            assert self.num_terms is not None
            needed = -(-needed // (2 * self.num_terms))  # k per term: 2·T·k singular directions
        break_even = -(-dense // unit)  # the smallest rank with no fewer parameters than dense
        if needed >= break_even:
            return 0, f"tolerance {self.tolerance} needs rank {needed}, not fewer parameters than dense"
        aligned = _ranks.aligned_rank_at_least(needed, below=break_even)
        if aligned is None:
            return 0, (f"tolerance {self.tolerance} needs rank {needed}, and the next rank the GPU kernels like is "
                       "not fewer parameters than dense")
        return aligned, ""


def _check_allocation(allocation: object, bytes_ratio: Optional[float], param_ratio: Optional[float], layer: str,
                      init: str, calibrated: bool, quantize: Optional[str]) -> None:
    """Raises sketch_model's ValueErrors for ``allocation`` and ``bytes_ratio``."""
    if allocation not in ("uniform", "global"):
        raise ValueError(f"sketch_model: allocation: expected 'uniform' or 'global', got {allocation!r}")
    if bytes_ratio is not None:
        if allocation != "global":
            raise ValueError("sketch_model: bytes_ratio: expected allocation='global' (a byte budget is spent over all "
                             f"layers), got allocation={allocation!r}")
        if not (isinstance(bytes_ratio, (int, float)) and 0.0 < bytes_ratio <= 1.0):
            raise ValueError(f"sketch_model: bytes_ratio: expected a number in (0, 1] (new bytes / the layers' float32 "
                             f"bytes), got {bytes_ratio!r}")
    if allocation != "global":
        return
    wants = [(param_ratio is None and bytes_ratio is None, "param_ratio= or bytes_ratio= (the budget)"),
             (not calibrated, "calibration= (the layers' errors are measured on it)"),
             (layer != "lowrank", "layer='lowrank'"), (init != "svd", "init='svd'"),
             (quantize not in (None, "int8"), "quantize=None or 'int8'")]
    for missing, what in wants:
        if missing:
            raise ValueError(f"sketch_model: allocation='global': expected {what}, got layer={layer!r}, "
                             f"init={init!r}, param_ratio={param_ratio!r}, bytes_ratio={bytes_ratio!r}, "
                             f"calibration={'given' if calibrated else None}, quantize={quantize!r}")


def _checked_quantize(quantize: object) -> str:
    """sketch_model's ``quantize`` (a name or a config object) as its format's name."""
    name = check_quantize_config(quantize, "sketch_model: quantize")
    if isinstance(quantize, Int8Config) and quantize.dense:
        raise ValueError("sketch_model: quantize: Int8Config(dense=True) quantizes plain nn.Linear layers, which "
                         "sketch_model does not convert; quantize them afterwards with "
                         "quantize_(model, Int8Config(dense=True)), got Int8Config(dense=True)")
    return name
