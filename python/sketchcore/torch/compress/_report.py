"""What ``sketch_model`` did, layer by layer: sizes, costs, and the error it made — on the
model's own data when calibration inputs were given, else on the weights, labelled as such."""
from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Optional

from torch import nn

from sketchcore.torch.compress._surgery import params

@dataclass
class LayerReport:
    """One converted (or kept) layer: what it became and what it costs.

    Built by :func:`sketch_model`, one per matched layer; the fields are documented below.

    Parameters
    ----------
    name : str
        The layer's qualified name in the model.
    kind : str
    in_features, out_features, rank : int
    params_before, params_after, flops_before, flops_after : int
    weight_error : float
    original : nn.Module, optional
    reason : str
    output_error : float, optional
    inner_activation : str
        The new LowRankLinear's bottleneck activation ("none" for a linear layer).
    quantize : str
        ``"int8"`` or ``"fp8"`` when the new layer was quantized (``sketch_model(quantize=...)``: an
        Int8LowRankLinear or Fp8LowRankLinear holding the factors in 8 bits, or an Int8Linear), else
        ``"none"``.
    choice : str
        The global allocation's option for the layer (``allocation="global"``), else ``""``.
    predicted_error : float, optional
        The global allocation's predicted share of the model's output error.

    Raises
    ------
    Nothing: a plain record (``dataclasses.dataclass``), no validation.

    Examples
    --------
    >>> from sketchcore.torch import sketch_model
    >>> model = nn.Sequential(nn.Linear(16, 32))
    >>> row = sketch_model(model, low_rank=4)["0"]
    >>> row.kind, row.in_features, row.out_features, row.params_before, row.params_after
    ('LowRankLinear', 16, 32, 544, 224)
    >>> row.output_error is None  # no calibration inputs
    True
    """

    name: str
    #: "SKLinear", "SKConv2d", "LowRankLinear", "RandMultiHeadAttention", or "kept dense"
    kind: str
    in_features: int  #: in_channels·kh·kw for a convolution
    out_features: int
    #: k per term for SKLinear/SKConv2d (2·T·k in total), the rank for LowRankLinear, the number
    #: of random features for attention, 0 when kept
    rank: int
    params_before: int
    params_after: int
    flops_before: int  #: multiply-adds × 2 per input row (per output pixel for a convolution)
    flops_after: int
    #: ‖W_new − W‖_F / ‖W‖_F; NaN where no weight is approximated (Performer attention, whose
    #: error lies in the attention itself)
    weight_error: float
    original: Optional[nn.Module] = field(default=None, repr=False)  #: the replaced module
    reason: str = ""  #: why a layer was kept dense
    #: the relative output error on the calibration inputs (None without calibration): for a
    #: linear layer ‖X(W_new − W)ᵀ‖_F / ‖X Wᵀ‖_F on the activations X the layer received (the
    #: bias, copied exactly, left out); for attention and convolutions, the measured output
    #: against the original module's on the same inputs
    output_error: Optional[float] = None
    #: σ of a LowRankLinear(inner_activation=...) built for pretraining; "none" otherwise
    inner_activation: str = "none"
    #: "int8" or "fp8" when the new layer holds 8-bit factors (Int8/Fp8LowRankLinear) or an 8-bit
    #: weight (Int8Linear); "none" otherwise
    quantize: str = "none"
    #: with allocation="global": the option chosen ("dense", "lowrank", "lowrank-int8" or "int8",
    #: the full-rank weight in int8); "" otherwise
    choice: str = ""
    #: with allocation="global": this layer's predicted share of the model's relative output
    #: error on the calibration inputs, √(its predicted ‖Δout‖² / ‖out‖²); None otherwise
    predicted_error: Optional[float] = None

    @classmethod
    def kept_dense(cls, name: str, module: nn.Module, reason: str, *, in_features: int = 0, out_features: int = 0,
                   flops: int = 0) -> LayerReport:
        """The row of a matched layer left as it is, and why (sizes 0 where it could not be read)."""
        size = params(module)
        return cls(name, "kept dense", in_features, out_features, 0, size, size, flops, flops, 0.0, None, reason)

    @classmethod
    def replacement(cls, name: str, original: nn.Module, new: nn.Module, *, rank: int, flops_before: int,
                    flops_after: int, weight_error: float, output_error: Optional[float] = None,
                    in_features: int, out_features: int) -> LayerReport:
        """The row of ``original`` replaced by ``new`` (its kind is ``new``'s class name)."""
        return cls(name, type(new).__name__, in_features, out_features, rank, params(original),
                   params(new), flops_before, flops_after, weight_error, original, "", output_error,
                   getattr(new, "inner_activation", "none"))


class ConversionReport(Mapping[str, LayerReport]):
    """What ``sketch_model`` did: a mapping from the name of each replaced layer to its
    :class:`LayerReport` (``report[name].original`` is the replaced module), plus ``kept``
    (matched layers left dense, with the reason: tied weights, no gain, ...) and ``skipped``
    (modules a pattern matched that are not convertible types, e.g. attention's ``out_proj``).

    With calibration inputs, ``calibrated`` is True, every layer's ``output_error`` is set and
    ``output_error`` is the whole model's relative output error on those inputs (its first
    output tensor, e.g. the logits; None when the model returns none). ``print(report)`` shows
    the per-layer table and the totals, with the error column saying which error it is.

    Attributes
    ----------
    replaced : dict of str to LayerReport
    kept : list of LayerReport
    skipped : list of (str, str)
        (name, why) of matched modules of other types.
    calibrated : bool
    output_error : float or None

    Raises
    ------
    KeyError
        ``report[name]`` for a name that was not replaced.

    Examples
    --------
    >>> from sketchcore.torch import sketch_model
    >>> model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
    >>> report = sketch_model(model, low_rank=4)
    >>> list(report), report.params_before, report.params_after, report.calibrated
    (['0', '2'], 808, 392, False)
    >>> print(report)  # doctest: +ELLIPSIS
    layer...kind...shape rank...params...MFLOP/row weight err
    ---...
    0...LowRankLinear...16→32 4 544→224...
    2...LowRankLinear...32→8 4 264→168...
    total parameters of the converted layers: 808 → 392
    errors: relative weight error ‖W_new − W‖/‖W‖ (no calibration inputs: ...)
    >>> report["1"]
    Traceback (most recent call last):
    KeyError: '1'
    """

    def __init__(self) -> None:
        self.replaced: dict[str, LayerReport] = {}
        self.kept: list[LayerReport] = []
        self.skipped: list[tuple[str, str]] = []
        self.calibrated = False
        self.calibration_batches = 0  #: number of calibration batches run
        self.output_error: Optional[float] = None
        #: "uniform" or "global" (one budget over all calibrated layers)
        self.allocation = "uniform"
        #: with allocation="global": the budget's unit ("parameters" or "bytes"), the budget and
        #: what the chosen layers spend of it; None otherwise
        self.budget: Optional[tuple[str, int, int]] = None
        #: with allocation="global": the predicted relative output error of the model (to compare
        #: with the measured ``output_error``); None otherwise
        self.predicted_output_error: Optional[float] = None

    def __getitem__(self, name: str) -> LayerReport:
        return self.replaced[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.replaced)

    def __len__(self) -> int:
        return len(self.replaced)

    @property
    def params_before(self) -> int:
        """Parameters of the replaced and kept layers before conversion.

        Examples
        --------
        >>> from sketchcore.torch import sketch_model
        >>> sketch_model(nn.Sequential(nn.Linear(16, 32)), low_rank=4).params_before
        544
        """
        return sum(r.params_before for r in [*self.replaced.values(), *self.kept])

    @property
    def params_after(self) -> int:
        """Parameters of the replaced and kept layers after conversion.

        Examples
        --------
        >>> from sketchcore.torch import sketch_model
        >>> sketch_model(nn.Sequential(nn.Linear(16, 32)), low_rank=4).params_after
        224
        """
        return sum(r.params_after for r in [*self.replaced.values(), *self.kept])

    def _error_text(self, row: LayerReport) -> str:
        value = row.output_error if self.calibrated else row.weight_error
        if value is None or math.isnan(value):
            return "unknown"
        return f"{value:.4f}"

    def __str__(self) -> str:
        rows = [*self.replaced.values(), *self.kept]
        column = "output err" if self.calibrated else "weight err"
        header = (f"{'layer':<34} {'kind':<22} {'shape':>11} {'rank':>5} {'params':>19} {'MFLOP/row':>17} "
                  f"{column:>10}")
        lines = [header, "-" * len(header)]
        for r in rows:
            shape = f"{r.in_features}→{r.out_features}"
            name = r.name if len(r.name) <= 34 else "…" + r.name[-33:]
            kind = r.kind if r.inner_activation == "none" else f"{r.kind}(σ={r.inner_activation})"
            kind += f"[{r.quantize}]" if r.quantize != "none" and r.kind != "Int8Linear" else ""
            lines.append(f"{name:<34} {kind:<22} {shape:>11} {r.rank:>5} "
                         f"{r.params_before:>9,}→{r.params_after:<9,} "
                         f"{r.flops_before / 1e6:>8.3f}→{r.flops_after / 1e6:<8.3f} {self._error_text(r):>10}"
                         + (f"  predicted {r.predicted_error:.4f}" if r.predicted_error is not None else "")
                         + (f"  ({r.reason})" if r.reason else ""))
        lines.append(f"total parameters of the converted layers: {self.params_before:,} → {self.params_after:,}")
        if self.budget is not None:
            unit, budget, spent = self.budget
            lines.append(f"global allocation: {spent:,} of a budget of {budget:,} {unit}; predicted model output "
                         f"error {self.predicted_output_error:.4f} (each layer's 'predicted': its share)")
        if self.calibrated:
            lines.append(f"errors: relative output error of each layer on the activations of {self.calibration_batches} "
                         "calibration batch(es)")
            model = "unknown (the model returned no tensor)" if self.output_error is None else f"{self.output_error:.4f}"
            lines.append(f"model output error on the calibration inputs: {model}")
        else:
            lines.append("errors: relative weight error ‖W_new − W‖/‖W‖ (no calibration inputs: the error on the "
                         "model's outputs is not measured)")
            if any(r.kind == "RandMultiHeadAttention" for r in rows):
                lines.append("Performer attention: error unknown without calibration inputs (pass calibration= to "
                             "measure it)")
        lines.extend(f"skipped {name}: {why}" for name, why in self.skipped)
        return "\n".join(lines)
