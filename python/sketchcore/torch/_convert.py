"""Compressing a trained model: ``sketch_model`` replaces its ``nn.Linear`` layers by sketched
ones (by fixed size, parameter ratio or error tolerance) and returns a report; ``restore_model``
rebuilds a compressed model from its state_dict without the dense weights."""
from __future__ import annotations

import fnmatch
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Optional

import torch
from torch import nn

from sketchcore.torch import _factors
from sketchcore.torch._attention import RandMultiHeadAttention, make_performer
from sketchcore.torch._conv import SKConv2d, _check_convertible
from sketchcore.torch._layer_state import inferred_linear_configs, saved_layer_configs
from sketchcore.torch._lowrank import LowRankLinear
from sketchcore.torch._modules import SKLinear


@dataclass
class LayerReport:
    """One converted (or kept) layer: what it became and what it costs."""

    name: str
    kind: str  #: "SKLinear", "SKConv2d", "LowRankLinear", "RandMultiHeadAttention", or "kept dense"
    in_features: int  #: in_channels·kh·kw for a convolution
    out_features: int
    #: k per term for SKLinear/SKConv2d (2·T·k in total), the rank for LowRankLinear, the number
    #: of random features for attention, 0 when kept
    rank: int
    params_before: int
    params_after: int
    flops_before: int  #: multiply-adds × 2 per input row (per output pixel for a convolution)
    flops_after: int
    weight_error: float  #: ‖W_new − W‖_F / ‖W‖_F
    original: Optional[nn.Module] = field(default=None, repr=False)  #: the replaced module
    reason: str = ""  #: why a layer was kept dense


class ConversionReport(Mapping[str, LayerReport]):
    """What ``sketch_model`` did: a mapping from the name of each replaced layer to its
    :class:`LayerReport` (``report[name].original`` is the replaced ``nn.Linear``), plus
    ``kept`` (matched layers left dense, with the reason) and ``skipped`` (modules a pattern
    matched that are not plain ``nn.Linear``, e.g. attention's ``out_proj``).
    ``print(report)`` shows the per-layer table and the totals."""

    def __init__(self) -> None:
        self.replaced: dict[str, LayerReport] = {}
        self.kept: list[LayerReport] = []
        self.skipped: list[tuple[str, str]] = []

    def __getitem__(self, name: str) -> LayerReport:
        return self.replaced[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.replaced)

    def __len__(self) -> int:
        return len(self.replaced)

    @property
    def params_before(self) -> int:
        return sum(r.params_before for r in [*self.replaced.values(), *self.kept])

    @property
    def params_after(self) -> int:
        return sum(r.params_after for r in [*self.replaced.values(), *self.kept])

    def __str__(self) -> str:
        rows = [*self.replaced.values(), *self.kept]
        header = (f"{'layer':<28} {'kind':<14} {'shape':>11} {'rank':>5} {'params':>19} {'MFLOP/row':>17} "
                  f"{'weight err':>10}")
        lines = [header, "-" * len(header)]
        for r in rows:
            shape = f"{r.in_features}→{r.out_features}"
            lines.append(f"{r.name[-28:]:<28} {r.kind:<14} {shape:>11} {r.rank:>5} "
                         f"{r.params_before:>9,}→{r.params_after:<9,} "
                         f"{r.flops_before / 1e6:>8.3f}→{r.flops_after / 1e6:<8.3f} {r.weight_error:>10.4f}"
                         + (f"  ({r.reason})" if r.reason else ""))
        lines.append(f"total parameters of the converted layers: {self.params_before:,} → {self.params_after:,}")
        lines.extend(f"skipped {name}: {why}" for name, why in self.skipped)
        return "\n".join(lines)


def _params(layer: nn.Module) -> int:
    return sum(p.numel() for p in layer.parameters())


def _choose(M: torch.Tensor, layer: str, num_terms: Optional[int], low_rank: Optional[int],
            tolerance: Optional[float], param_ratio: Optional[float]) -> tuple[int, str]:
    """The rank (per term for SKLinear) and, when the layer should stay dense, the reason."""
    n_in, n_out = M.shape
    dense = n_in * n_out
    # learnable parameters per unit of rank
    if layer == "sklinear":
        per_rank = (n_in + n_out) * num_terms
    elif layer == "skconv2d":
        per_rank = 2 * num_terms * n_in
    else:
        per_rank = n_in + n_out
    if low_rank is not None:
        return low_rank, ""
    if param_ratio is not None:
        rank = int(param_ratio * dense // per_rank)
        return (rank, "") if rank >= 1 else (0, f"no rank ≥ 1 fits param_ratio={param_ratio}")
    assert tolerance is not None
    rank, _ = _factors.rank_for_tolerance(M, tolerance)
    if layer in ("sklinear", "skconv2d"):
        rank = -(-rank // (2 * num_terms))  # k per term: 2·T·k singular directions
    if rank * per_rank >= dense:
        return 0, f"tolerance {tolerance} needs rank {rank}, not fewer parameters than dense"
    return rank, ""


def sketch_model(model: nn.Module, num_terms: Optional[int] = None, low_rank: Optional[int] = None, *,
                 tolerance: Optional[float] = None, param_ratio: Optional[float] = None,
                 layer: Literal["sklinear", "lowrank"] = "sklinear", include: Optional[Iterable[str]] = None,
                 exclude: Optional[Iterable[str]] = None, init: str = "svd", conv2d: bool = False,
                 attention: Optional[int] = None, **kwargs: Any) -> ConversionReport:
    """Replaces, in place, the ``nn.Linear`` layers of ``model`` whose qualified names match a
    pattern of ``include`` (all when None) and none of ``exclude`` (fnmatch patterns).

    Size (needed unless only ``attention`` is given): ``low_rank`` (k per term for SKLinear, the rank for LowRankLinear), or
    ``param_ratio`` (learnable parameters of each new layer / the dense layer's), or
    ``tolerance`` (each layer gets the smallest size whose relative weight error is at most
    ``tolerance``, from its singular values; a layer that cannot meet it with fewer parameters
    than dense stays dense). ``layer="sklinear"`` (needs ``num_terms``) builds Panther's layer
    with ``init`` ("svd": the best rank-2Tk approximation; "panther": Panther's random-sign
    initialisation); ``layer="lowrank"`` builds :class:`LowRankLinear` from the truncated SVD.
    Other keyword arguments go to the new layers (``activation``, ``dropout``). With
    ``conv2d=True`` (and ``layer="sklinear"``), plain ``nn.Conv2d`` layers are replaced too, by
    :class:`SKConv2d` of the same ``num_terms`` and ``init`` (their kernel as an
    (in·kh·kw) × out matrix is what is approximated); convolutions SKConv2d refuses (groups,
    padding modes) are reported as kept, with the reason. With ``attention=m``, plain
    ``nn.MultiheadAttention`` modules become Performer attention with m random features
    (:func:`make_performer`, softmax kernel, causal wherever the caller passes a causal mask or
    ``is_causal``); their projections are copied, so the report shows no weight error, and the
    ``nn.TransformerEncoder`` holding them stops using its nested-tensor fast path (torch's fused
    exact attention, which would bypass them).

    Returns a :class:`ConversionReport` (print it for the per-layer table). Modules a pattern
    matches that are not plain ``nn.Linear`` (subclasses such as attention's
    ``NonDynamicallyQuantizableLinear``, whose owner reads ``.weight`` directly) are reported as
    skipped, not silently ignored.
    """
    sizes = sum(v is not None for v in (low_rank, tolerance, param_ratio))
    attention_only = sizes == 0 and attention is not None and not conv2d
    if sizes != 1 and not attention_only:
        raise ValueError("sketch_model: expected exactly one of low_rank, tolerance and param_ratio (or none with "
                         f"only attention=), got low_rank={low_rank!r}, tolerance={tolerance!r}, "
                         f"param_ratio={param_ratio!r}")
    if layer not in ("sklinear", "lowrank"):
        raise ValueError(f"sketch_model: layer: expected 'sklinear' or 'lowrank', got {layer!r}")
    if not attention_only and layer == "sklinear" and (num_terms is None or isinstance(num_terms, bool) or not isinstance(num_terms, int)
                                or num_terms < 1):
        raise ValueError(f"sketch_model: num_terms: expected an integer ≥ 1 for layer='sklinear', got {num_terms!r}")
    if attention is not None and (isinstance(attention, bool) or not isinstance(attention, int) or attention < 1):
        raise ValueError(f"sketch_model: attention: expected a number of random features ≥ 1, got {attention!r}")
    if conv2d and layer != "sklinear":
        raise ValueError(f"sketch_model: conv2d: convolutions become SKConv2d, which needs layer='sklinear', "
                         f"got layer={layer!r}")
    if tolerance is not None and not 0.0 <= tolerance < 1.0:
        raise ValueError(f"sketch_model: tolerance: expected a number in [0, 1), got {tolerance!r}")
    if param_ratio is not None and not 0.0 < param_ratio:
        raise ValueError(f"sketch_model: param_ratio: expected a positive number, got {param_ratio!r}")
    include = list(include) if include is not None else None
    exclude = list(exclude or ())
    report = ConversionReport()
    replaced_attention: list[str] = []
    for name, module in list(model.named_modules()):
        if not name or (include is not None and not any(fnmatch.fnmatchcase(name, p) for p in include)):
            continue
        if any(fnmatch.fnmatchcase(name, p) for p in exclude):
            continue
        if any(name.startswith(prefix + ".") for prefix in replaced_attention):
            continue  # inside an attention module already replaced (its out_proj)
        if attention is not None and type(module) is nn.MultiheadAttention:
            if _replace_attention(model, name, module, attention, report):
                replaced_attention.append(name)
            continue
        if conv2d and type(module) is nn.Conv2d:
            _replace_conv(model, name, module, num_terms, low_rank, tolerance, param_ratio, init, report)
            continue
        if attention_only:
            continue
        if type(module) is not nn.Linear:
            if isinstance(module, nn.Linear):
                report.skipped.append((name, f"{type(module).__name__} is a subclass of nn.Linear, "
                                             "not replaced (its owner may read .weight directly)"))
            continue
        M = module.weight.detach().t()
        n_in, n_out = M.shape
        rank, reason = _choose(M, layer, num_terms, low_rank, tolerance, param_ratio)
        flops_dense = 2 * n_in * n_out
        if reason:
            report.kept.append(LayerReport(name, "kept dense", n_in, n_out, 0, _params(module), _params(module),
                                           flops_dense, flops_dense, 0.0, None, reason))
            continue
        if layer == "lowrank":
            rank = min(rank, n_in, n_out)
            new: nn.Module = LowRankLinear.from_linear(module, rank, **kwargs)
            flops = 2 * rank * (n_in + n_out)
        else:
            new = SKLinear.from_linear(module, num_terms, rank, init=init, **kwargs)
            flops = 2 * 2 * num_terms * rank * (n_in + n_out)
        error = _factors.relative_error(new.weight, module.weight)
        _set_module(model, name, new)
        report.replaced[name] = LayerReport(name, type(new).__name__, n_in, n_out, rank, _params(module), _params(new),
                                            flops_dense, flops, error, module)
    if replaced_attention:
        _no_fused_encoders(model)
    return report


def _set_module(model: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, new)


def _replace_conv(model: nn.Module, name: str, conv: nn.Conv2d, num_terms: Any, low_rank: Optional[int],
                  tolerance: Optional[float], param_ratio: Optional[float], init: str, report: ConversionReport) -> None:
    """sketch_model's step for one nn.Conv2d: an SKConv2d, or kept dense with the reason."""
    M = conv.weight.detach().reshape(conv.out_channels, -1).t()
    n_in, n_out = M.shape
    flops_dense = 2 * n_in * n_out
    try:
        _check_convertible(conv)  # SKConv2d's own refusals (groups, padding modes)
        rank, reason = _choose(M, "skconv2d", num_terms, low_rank, tolerance, param_ratio)
    except ValueError as error:
        rank, reason = 0, str(error)
    if reason:
        report.kept.append(LayerReport(name, "kept dense", n_in, n_out, 0, _params(conv), _params(conv), flops_dense,
                                       flops_dense, 0.0, None, reason))
        return
    new = SKConv2d.fromTorch(conv, num_terms, rank, init=init)
    _set_module(model, name, new)
    report.replaced[name] = LayerReport(name, "SKConv2d", n_in, n_out, rank, _params(conv), _params(new), flops_dense,
                                        2 * 2 * num_terms * rank * (n_in + n_out),
                                        _factors.relative_error(new.weight, conv.weight), conv)


def _no_fused_encoders(model: nn.Module) -> None:
    """Turns off the nested-tensor fast path of every nn.TransformerEncoder holding Performer
    attention: it runs torch's fused exact attention from the first layer's weights, bypassing it."""
    for owner in model.modules():
        if isinstance(owner, nn.TransformerEncoder) and any(isinstance(m, RandMultiHeadAttention)
                                                             for m in owner.modules()):
            owner.use_nested_tensor = False


def _replace_attention(model: nn.Module, name: str, mha: nn.MultiheadAttention, features: int,
                       report: ConversionReport) -> bool:
    """sketch_model's step for one nn.MultiheadAttention: Performer attention, or kept with the reason."""
    E = mha.embed_dim
    projections = 2 * 4 * E * E  # per token: q, k, v and output projections (the attention itself grows with L)
    try:
        new = make_performer(mha, features)
    except ValueError as error:
        report.kept.append(LayerReport(name, "kept dense", E, E, 0, _params(mha), _params(mha), projections,
                                       projections, 0.0, None, str(error)))
        return False
    _set_module(model, name, new)
    report.replaced[name] = LayerReport(name, "RandMultiHeadAttention", E, E, features, _params(mha), _params(new),
                                        projections, projections, 0.0, mha)
    return True


_LAYERS = {"SKLinear": SKLinear, "LowRankLinear": LowRankLinear, "SKConv2d": SKConv2d,
           "RandMultiHeadAttention": RandMultiHeadAttention}


def restore_model(model: nn.Module, state_dict: Mapping[str, Any], *, strict: bool = True) -> nn.Module:
    """Loads a compressed model's ``state_dict`` into ``model`` built with its original (dense)
    architecture: every layer the state_dict records as a sketchcore layer (its configuration in
    the state_dict's metadata, which ``torch.save``/``torch.load`` keep) is first replaced by an
    empty one of the saved configuration, then the whole state_dict is loaded. A state_dict
    without metadata (Panther's, or a plain ``dict`` copy) still restores: an ``nn.Linear`` whose
    ``weight`` is missing and whose S1s/S2s/U1s/U2s (or S/U) are present becomes an SKLinear (or
    LowRankLinear) of those shapes, without activation or dropout. No dense weight or conversion is
    needed. Returns ``model``."""
    configs = {**inferred_linear_configs(model, state_dict), **saved_layer_configs(state_dict)}
    for name, saved in configs.items():
        config = dict(saved)
        cls = _LAYERS.get(config.pop("sketchcore"))
        if cls is None:
            continue
        old = model.get_submodule(name)
        reference = next(iter(old.parameters()), None) if isinstance(old, nn.Module) else None
        placement = {} if reference is None else {"dtype": reference.dtype, "device": reference.device}
        if cls is RandMultiHeadAttention:
            attention = RandMultiHeadAttention(config["embed_dim"], config["num_heads"], config["num_random_features"],
                                               config["dropout"], config["bias"], config["kernel_fn"],
                                               config["iscausal"], seed=config["seed"], **placement)
            attention.batch_first = config.get("batch_first", True)
            _set_module(model, name, attention)
            continue
        if cls is SKConv2d:
            new: nn.Module = SKConv2d(config["in_channels"], config["out_channels"], tuple(config["kernel_size"]),
                                      tuple(config["stride"]), tuple(config["padding"]), config["bias"],
                                      config["num_terms"], config["low_rank"], dilation=tuple(config["dilation"]),
                                      **placement)
        elif cls is SKLinear:
            new = SKLinear(config["in_features"], config["out_features"], config["num_terms"], config["low_rank"],
                           bias=config["bias"], activation=config["activation"], dropout=config["dropout"],
                           init="linear", **placement)  # the cheapest init: the state_dict replaces the factors
            new.init = config.get("init", "panther")
        else:
            new = LowRankLinear(config["in_features"], config["out_features"], config["rank"], bias=config["bias"],
                                activation=config["activation"], dropout=config.get("dropout", 0.0), **placement)
        _set_module(model, name, new)
    _no_fused_encoders(model)
    model.load_state_dict(state_dict, strict=strict)
    return model
