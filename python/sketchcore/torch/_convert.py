"""Compressing a trained model: ``sketch_model`` replaces its linear maps (``nn.Linear``,
``transformers``' ``Conv1D``, any type given to ``register_linear``) by sketched layers — by
fixed size, parameter ratio or error tolerance, from the weights or from calibration data —
and returns a report; ``restore_model`` rebuilds a compressed model from its state_dict."""
from __future__ import annotations

import fnmatch
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Iterable, Literal, Optional

import torch
from torch import Tensor, nn

from sketchcore.torch import _calibrate, _factors, _whitened
from sketchcore.torch._attention import RandMultiHeadAttention, make_performer
from sketchcore.torch._conv import SKConv2d, _check_convertible
from sketchcore.torch._int8 import Int8LowRankLinear
from sketchcore.torch._convert_linear import build, choose_rank, dense_equivalent
from sketchcore.torch._layer_state import inferred_linear_configs, saved_layer_configs
from sketchcore.torch._lowrank import LowRankLinear
from sketchcore.torch._modules import SKLinear
from sketchcore.torch._pretraining import check_pretraining_options
from sketchcore.torch._quantize import check_quantize_config, quantize_layers
from sketchcore.torch._registry import LinearSpec, read_linear, register_linear, spec_of, unregistered_subclass
from sketchcore.torch._report import ConversionReport, LayerReport
from sketchcore.torch._surgery import no_fused_encoders, parameter_names, params, replace, set_module, tied_reason

__all__ = ["ConversionReport", "LayerReport", "register_linear", "restore_model", "sketch_model"]

#: Without a tolerance, Performer attention measured on calibration inputs warns above this
#: relative output error.
ATTENTION_WARNING = 0.1


@dataclass
class _Linear:
    """A linear map chosen for conversion."""

    name: str
    module: nn.Module
    M: Tensor  # in × out
    bias: Optional[Tensor]


def sketch_model(model: nn.Module, num_terms: Optional[int] = None, low_rank: Optional[int] = None, *,
                 tolerance: Optional[float] = None, param_ratio: Optional[float] = None,
                 layer: Optional[Literal["sklinear", "lowrank"]] = None, include: Optional[Iterable[str]] = None,
                 exclude: Optional[Iterable[str]] = None, init: str = "svd", conv2d: bool = False,
                 attention: Optional[int] = None, calibration: Optional[Iterable[Any]] = None,
                 tied: Literal["keep", "untie"] = "keep", inner_activation: Optional[str] = None,
                 quantize: Optional[Literal["int8"]] = None, **kwargs: Any) -> ConversionReport:
    """Replaces, in place, the linear maps of ``model`` whose qualified names match a pattern of
    ``include`` (all when None) and none of ``exclude`` (fnmatch patterns): ``nn.Linear``,
    ``transformers``' ``Conv1D`` (GPT-2's projections) and the types given to
    :func:`register_linear`.

    Size (one of them; none with only ``attention``): ``low_rank`` (k per term for SKLinear,
    the rank for LowRankLinear), ``param_ratio`` (learnable parameters of each new layer / the
    dense layer's, at most 1), or ``tolerance`` (each layer gets the smallest size whose
    relative error is at most ``tolerance``; a layer that cannot meet it with fewer parameters
    stays dense).

    Ranks the hardware likes: a rank chosen by ``param_ratio`` or ``tolerance`` is a multiple of
    64 from 256 and of 16 from 16 (GPU tensor cores fall back to slow kernels on rows that are
    not multiples of 16 bytes: 4.4× slower at rank 375 than 376 in bf16 on an H200); below 16 it
    is exact. ``param_ratio`` rounds down, so the budget is never exceeded; ``tolerance`` rounds
    up, so it is always met, and a layer whose rounded rank would not save parameters stays
    dense. A ``low_rank`` you give is used as it is (the core pads what it owns so that any rank
    runs on the fast kernels). The report gives each layer's rank and real parameter count.

    Pretraining (CoLA-style models): ``init="random"`` with ``layer="lowrank"`` turns a freshly
    initialised model (e.g. ``LlamaForCausalLM`` built from a config) into its low-rank form
    without an SVD: each factor is drawn N(0, s²) with s² = σ_W / √rank, σ_W the standard
    deviation of the replaced weight, so that S·U has the variance of the dense init (balanced
    factors); the bias is kept. ``inner_activation="silu"`` puts CoLA's bottleneck activation
    in every new layer (``LowRankLinear(..., inner_activation=...)``); it needs
    ``init="random"``: a trained model's SVD factors approximate W·x, not a nonlinear layer.

    Layer: ``layer="lowrank"`` builds :class:`LowRankLinear` (rank-r ``x S U + b``) — the
    default when ``num_terms`` is not given, so ``sketch_model(model, tolerance=0.1)`` works
    alone: at a given parameter count it has half the FLOPs of an SKLinear and its rank is
    what the tolerance needs (rounded up as above). ``layer="sklinear"`` (the default when ``num_terms`` is
    given) builds Panther's layer with ``init`` ("svd": fixed factors from singular subspaces,
    the best rank-2Tk approximation; "panther": Panther's random-sign initialisation).

    Calibration: with ``calibration`` — an iterable of model inputs (tensors, tuples of
    positional arguments or dicts of keyword arguments, e.g. a few batches of training data),
    run once through the model in eval mode with hooks — each layer's factors minimise its
    *output* error on the activations it receives (whitened truncation from the float64 Gram
    matrix XᵀX of its inputs, d_in × d_in per layer: statistics, not activations; exact for
    rank-deficient activations; LowRankLinear and SKLinear with ``init="svd"``), and
    ``tolerance`` is a relative output error ‖X(W_new − W)ᵀ‖ / ‖X Wᵀ‖. The batches are kept to
    measure the converted model: the report then shows each layer's output error and the whole
    model's (its first output tensor, e.g. the logits, against the original's). A layer the
    calibration never reaches stays dense. Without calibration, ``tolerance`` is a relative
    weight error and the report says so.

    Tied weights: a layer whose weight is also used elsewhere (an ``lm_head`` tied to the
    input embedding, a module registered twice) is kept and listed in ``report.kept`` with the
    names it is tied to; ``tied="untie"`` converts it anyway (the other users keep the dense
    weight, so the model grows).

    Quantization: ``quantize="int8"`` ends the conversion with :func:`quantize_` — every new
    LowRankLinear/SKLinear becomes an :class:`Int8LowRankLinear` (int8 factors, inference on
    the CPU; the report's rows say ``quantize="int8"``). Layers kept dense stay ``nn.Linear``:
    ``torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)`` quantizes
    them and leaves sketchcore's layers alone.

    Other keyword arguments go to the new layers (``activation``, ``dropout``). With
    ``conv2d=True`` (and ``layer="sklinear"``), plain ``nn.Conv2d`` layers become
    :class:`SKConv2d` of the same ``num_terms`` and ``init``; convolutions it refuses are kept,
    with the reason. With ``attention=m``, plain ``nn.MultiheadAttention`` modules become
    Performer attention with m random features (:func:`make_performer`; their projections are
    copied, so no weight is approximated: without calibration their error is reported as
    unknown; with it, the measured output error of each is reported and a warning is issued
    when it exceeds ``tolerance``, or 0.1 without one). ``nn.TransformerEncoder`` holding them
    stops using its nested-tensor fast path (torch's fused exact attention would bypass them).

    Returns a :class:`ConversionReport` (print it for the per-layer table). Modules a pattern
    matches that subclass a convertible type without being registered (attention's
    ``NonDynamicallyQuantizableLinear``, whose owner reads ``.weight`` directly) are reported as
    skipped, not silently ignored.

    Parameters
    ----------
    model : nn.Module
        Converted in place.
    num_terms : int, optional
        T, the number of terms of each SKLinear/SKConv2d (needed for ``layer="sklinear"``).
    low_rank : int, optional
        k per term (SKLinear) or the rank (LowRankLinear).
    tolerance : float, optional
        Relative error in [0, 1) each layer may make.
    param_ratio : float, optional
        Ratio of new to dense learnable parameters, in (0, 1].
    layer : {"sklinear", "lowrank"}, optional
    include, exclude : iterable of str, optional
        fnmatch patterns over qualified module names.
    init : str
        ``"svd"`` or ``"panther"`` (SKLinear); ``"random"`` (LowRankLinear, for pretraining:
        balanced random factors, no SVD).
    conv2d : bool
        Also convert ``nn.Conv2d`` to :class:`SKConv2d`.
    attention : int, optional
        Random features of the Performer attention replacing ``nn.MultiheadAttention``.
    calibration : iterable, optional
        Model inputs for output-error-aware conversion and measurement.
    tied : {"keep", "untie"}
    inner_activation : {"none", "relu", "gelu", "gelu_tanh", "silu"}, optional
        σ on each new LowRankLinear's rank-wide intermediate (needs ``init="random"``).
    quantize : {"int8"}, optional
        Quantize the new low-rank layers (:func:`quantize_`); None keeps them float.
    **kwargs
        Passed to the new layers (``activation``, ``dropout``).

    Returns
    -------
    ConversionReport

    Raises
    ------
    ValueError
        Not exactly one of ``low_rank``, ``tolerance``, ``param_ratio`` (unless only
        ``attention``); an unknown ``layer`` or ``tied``; ``num_terms`` not an integer ≥ 1 for
        ``"sklinear"``; ``attention`` < 1; ``conv2d`` without ``"sklinear"``; ``tolerance``
        outside [0, 1); ``param_ratio`` outside (0, 1] (above 1 the model would grow); a
        registered module whose weight or bias has the wrong shape; an unknown
        ``inner_activation`` (the message lists the valid ones), one with ``layer="sklinear"`` or
        without ``init="random"`` (converting a trained model), ``init="random"`` with
        ``layer="sklinear"`` or with calibration inputs; an unknown ``quantize``. The new layers' constructors raise on
        bad ``kwargs``.
    TypeError
        ``model`` is not an ``nn.Module`` (a state_dict, say: build the model, load it, pass it).

    Warns
    -----
    UserWarning
        When no layer was replaced (no pattern matched, or every matched layer was kept dense),
        with the reasons.

    Examples
    --------
    >>> _ = torch.manual_seed(0)
    >>> model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
    >>> report = sketch_model(model, low_rank=4)
    >>> type(model[0]).__name__, report["0"].rank, report.params_before, report.params_after
    ('LowRankLinear', 4, 808, 392)
    >>> sketch_model(model)
    Traceback (most recent call last):
    ValueError: sketch_model: expected exactly one of low_rank, tolerance and param_ratio ...
    """
    if not isinstance(model, nn.Module):
        hint = " (a state_dict: build the model, load it, and pass the model)" if isinstance(model, Mapping) else ""
        raise TypeError(f"sketch_model: model: expected a torch.nn.Module, got {type(model).__name__}{hint}")
    sizes = sum(v is not None for v in (low_rank, tolerance, param_ratio))
    attention_only = sizes == 0 and attention is not None and not conv2d
    if sizes != 1 and not attention_only:
        raise ValueError("sketch_model: expected exactly one of low_rank, tolerance and param_ratio (or none with "
                         f"only attention=), got low_rank={low_rank!r}, tolerance={tolerance!r}, "
                         f"param_ratio={param_ratio!r}")
    if layer is None:
        layer = "sklinear" if num_terms is not None or conv2d else "lowrank"
    if layer not in ("sklinear", "lowrank"):
        raise ValueError(f"sketch_model: layer: expected 'sklinear' or 'lowrank', got {layer!r}")
    if not attention_only and layer == "sklinear" and (num_terms is None or isinstance(num_terms, bool)
                                                       or not isinstance(num_terms, int) or num_terms < 1):
        raise ValueError(f"sketch_model: num_terms: expected an integer ≥ 1 for layer='sklinear', got {num_terms!r}")
    if attention is not None and (isinstance(attention, bool) or not isinstance(attention, int) or attention < 1):
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
    check_pretraining_options(layer, init, inner_activation, calibration)
    if quantize is not None:
        check_quantize_config(quantize, "sketch_model: quantize")
    if inner_activation is not None:
        kwargs = {**kwargs, "inner_activation": inner_activation}
    batches = _calibrate.batches_of(calibration) if calibration is not None else None
    include = list(include) if include is not None else None
    exclude = list(exclude or ())
    report = ConversionReport()
    names = parameter_names(model)
    linears: list[_Linear] = []
    convs: list[tuple[str, nn.Conv2d]] = []
    performers: dict[str, nn.Module] = {}  # name → its Performer, built now, swapped in after calibration
    for name, module in list(model.named_modules()):
        if not name or (include is not None and not any(fnmatch.fnmatchcase(name, p) for p in include)):
            continue
        if any(fnmatch.fnmatchcase(name, p) for p in exclude):
            continue
        if any(name.startswith(prefix + ".") for prefix in performers):
            continue  # inside an attention module being replaced (its out_proj)
        if attention is not None and type(module) is nn.MultiheadAttention:
            performer = _performer(name, module, attention, report)
            if performer is not None:
                performers[name] = performer
            continue
        if conv2d and type(module) is nn.Conv2d:
            convs.append((name, module))
            continue
        if attention_only:
            continue
        spec = spec_of(module)
        if spec is None:
            why = unregistered_subclass(module)
            if why:
                report.skipped.append((name, why))
            continue
        linear = _candidate(name, module, spec, names, tied, report)
        if linear is not None:
            linears.append(linear)

    grams: dict[str, Tensor] = {}
    if batches is not None and linears:
        grams = _calibrate.collect_grams(model, {c.name: (c.module, c.M.shape[0]) for c in linears}, batches)
    for c in linears:
        _replace_linear(model, c, grams.get(c.name), batches is not None, layer, num_terms, low_rank, tolerance,
                        param_ratio, init, kwargs, report)
    for name, conv in convs:
        _replace_conv(model, name, conv, num_terms, low_rank, tolerance, param_ratio, init, report)
    for name, performer in performers.items():
        replace(model, name, report.replaced[name].original or performer, performer)
    if performers:
        no_fused_encoders(model)
    if batches is not None:
        _measure(model, batches, tolerance, report)
    if not report.replaced:
        _warn_nothing_replaced(report, include, exclude)
    if quantize is not None:
        # after calibration: the errors in the report are the float layers'
        for name in quantize_layers(model, only=set(report.replaced)):
            report.replaced[name].quantize = quantize
    return report


def _warn_nothing_replaced(report: ConversionReport, include: Optional[list[str]], exclude: list[str]) -> None:
    """A conversion that changes nothing is almost always a mistake (a pattern that matches no
    layer, a budget too small for every layer): say so, with the reasons the report holds."""
    if report.kept:
        why = "; ".join(f"{row.name}: {row.reason}" for row in report.kept[:3])
        more = f" (and {len(report.kept) - 3} more)" if len(report.kept) > 3 else ""
        detail = f"every matched layer was kept dense ({why}{more})"
    else:
        detail = (f"no convertible layer matched include={include!r}, exclude={exclude!r}"
                  + (f"; skipped: {', '.join(name for name, _ in report.skipped[:3])}" if report.skipped else ""))
    warnings.warn(f"sketch_model: no layer was replaced: {detail}", UserWarning, stacklevel=3)


def _candidate(name: str, module: nn.Module, spec: LinearSpec, names: dict[int, list[str]], tied: str,
               report: ConversionReport) -> Optional[_Linear]:
    """The linear map to convert, or None after recording why it stays (tied, malformed)."""
    try:
        M, bias = read_linear(module, spec)
    except ValueError as error:
        report.kept.append(LayerReport(name, "kept dense", 0, 0, 0, params(module), params(module), 0, 0, 0.0, None,
                                       str(error)))
        return None
    n_in, n_out = M.shape
    weight = getattr(module, spec.weight)
    reason = tied_reason(weight, f"{name}.{spec.weight}", names)
    if reason and tied == "keep":
        report.kept.append(LayerReport(name, "kept dense", n_in, n_out, 0, params(module), params(module),
                                       2 * n_in * n_out, 2 * n_in * n_out, 0.0, None, reason))
        return None
    return _Linear(name, module, M, bias)


def _replace_linear(model: nn.Module, c: _Linear, gram: Optional[Tensor], calibrated: bool, layer: str,
                    num_terms: Optional[int], low_rank: Optional[int], tolerance: Optional[float],
                    param_ratio: Optional[float], init: str, kwargs: dict[str, Any], report: ConversionReport) -> None:
    """sketch_model's step for one linear map: a LowRankLinear or SKLinear, or kept dense with the reason."""
    n_in, n_out = c.M.shape
    flops_dense = 2 * n_in * n_out
    size = params(c.module)
    if calibrated and gram is None:
        report.kept.append(LayerReport(c.name, "kept dense", n_in, n_out, 0, size, size, flops_dense, flops_dense,
                                       0.0, None, "never called on the calibration inputs", 0.0))
        return
    s: Optional[Tensor] = None
    Vt: Optional[Tensor] = None
    if gram is not None:
        s, Vt = _whitened.whitened_svd(c.M, gram)
    whitened = s

    def tolerance_rank() -> int:
        assert tolerance is not None
        if whitened is not None:
            return _whitened.rank_for_output_tolerance(whitened, tolerance)[0]
        return _factors.rank_for_tolerance(c.M, tolerance)[0]

    rank, reason = choose_rank(n_in, n_out, layer, num_terms, low_rank, tolerance, param_ratio, tolerance_rank)
    if reason:
        report.kept.append(LayerReport(c.name, "kept dense", n_in, n_out, 0, size, size, flops_dense, flops_dense,
                                       0.0, None, reason, 0.0 if calibrated else None))
        return
    if layer == "lowrank":
        rank = min(rank, n_in, n_out)
        flops = 2 * rank * (n_in + n_out)
    else:
        assert num_terms is not None
        flops = 2 * 2 * num_terms * rank * (n_in + n_out)
    weight = c.M
    new = build(c.M, c.bias, layer, rank, num_terms, init, Vt, weight.dtype, weight.device, kwargs)
    approximation = dense_equivalent(new)
    output_error = _whitened.output_error(approximation, c.M, gram) if gram is not None else None
    replace(model, c.name, c.module, new)
    # init="random" approximates no weight (a model to pretrain): its weight error is unknown (NaN).
    weight_error = math.nan if init == "random" else _factors.relative_error(approximation, c.M)
    report.replaced[c.name] = LayerReport(c.name, type(new).__name__, n_in, n_out, rank, size, params(new),
                                          flops_dense, flops, weight_error, c.module, "", output_error,
                                          getattr(new, "inner_activation", "none"))


def _replace_conv(model: nn.Module, name: str, conv: nn.Conv2d, num_terms: Any, low_rank: Optional[int],
                  tolerance: Optional[float], param_ratio: Optional[float], init: str, report: ConversionReport) -> None:
    """sketch_model's step for one nn.Conv2d: an SKConv2d, or kept dense with the reason."""
    M = conv.weight.detach().reshape(conv.out_channels, -1).t()
    n_in, n_out = M.shape
    flops_dense = 2 * n_in * n_out
    try:
        _check_convertible(conv)  # SKConv2d's own refusals (groups, padding modes)
        rank, reason = choose_rank(n_in, n_out, "skconv2d", num_terms, low_rank, tolerance, param_ratio,
                                   lambda: _factors.rank_for_tolerance(M, tolerance or 0.0)[0])
    except ValueError as error:
        rank, reason = 0, str(error)
    if reason:
        report.kept.append(LayerReport(name, "kept dense", n_in, n_out, 0, params(conv), params(conv), flops_dense,
                                       flops_dense, 0.0, None, reason))
        return
    new = SKConv2d.fromTorch(conv, num_terms, rank, init=init)
    replace(model, name, conv, new)
    report.replaced[name] = LayerReport(name, "SKConv2d", n_in, n_out, rank, params(conv), params(new), flops_dense,
                                        2 * 2 * num_terms * rank * (n_in + n_out),
                                        _factors.relative_error(new.weight, conv.weight), conv)


def _performer(name: str, mha: nn.MultiheadAttention, features: int, report: ConversionReport) -> Optional[nn.Module]:
    """sketch_model's step for one nn.MultiheadAttention: its Performer attention (recorded as
    replaced; swapped in later), or None after recording why it is kept."""
    E = mha.embed_dim
    projections = 2 * 4 * E * E  # per token: q, k, v and output projections (the attention itself grows with L)
    try:
        new = make_performer(mha, features)
    except ValueError as error:
        report.kept.append(LayerReport(name, "kept dense", E, E, 0, params(mha), params(mha), projections,
                                       projections, 0.0, None, str(error)))
        return None
    report.replaced[name] = LayerReport(name, "RandMultiHeadAttention", E, E, features, params(mha), params(new),
                                        projections, projections, float("nan"), mha)
    return new


def _measure(model: nn.Module, batches: list[Any], tolerance: Optional[float], report: ConversionReport) -> None:
    """Measures on the calibration inputs what the Gram matrices do not give (attention and
    convolutions layer by layer, the whole model), fills the report, and warns about
    Performer attention whose output error exceeds the tolerance."""
    report.calibrated = True
    report.calibration_batches = len(batches)
    measured = [name for name, row in report.replaced.items() if row.output_error is None]
    originals = {name: row.original for name, row in report.replaced.items() if row.original is not None}
    per_layer, report.output_error = _calibrate.measure(model, originals, measured, batches,
                                                        lambda name, module: set_module(model, name, module))
    for row in report.kept:
        if row.output_error is None:
            row.output_error = 0.0  # kept as it is
    limit = ATTENTION_WARNING if tolerance is None else tolerance
    for name, error in per_layer.items():
        row = report.replaced[name]
        row.output_error = error
        if row.kind == "RandMultiHeadAttention" and error > limit:
            warnings.warn(f"sketch_model: the Performer attention at {name!r} ({row.rank} random features) has a "
                          f"relative output error of {error:.3f} on the calibration inputs, above "
                          f"{'the tolerance' if tolerance is not None else 'the warning level'} {limit} (FAVOR+ "
                          "approximates sharp softmax attention poorly and improves only slowly with more features; "
                          f"model output error: {report.output_error})", UserWarning, stacklevel=3)



_LAYERS = {"SKLinear": SKLinear, "LowRankLinear": LowRankLinear, "SKConv2d": SKConv2d,
           "RandMultiHeadAttention": RandMultiHeadAttention, "Int8LowRankLinear": Int8LowRankLinear}


def restore_model(model: nn.Module, state_dict: Mapping[str, Any], *, strict: bool = True) -> nn.Module:
    """Loads a compressed model's ``state_dict`` into ``model`` built with its original (dense)
    architecture: every layer the state_dict records as a sketchcore layer (its configuration in
    the state_dict's metadata, which ``torch.save``/``torch.load`` keep) is first replaced by an
    empty one of the saved configuration, then the whole state_dict is loaded. A state_dict
    without metadata (Panther's, or a plain ``dict`` copy) still restores: an ``nn.Linear`` whose
    ``weight`` is missing and whose S1s/S2s/U1s/U2s (or S/U) are present becomes an SKLinear (or
    LowRankLinear) of those shapes, without activation or dropout. No dense weight or conversion is
    needed.

    Parameters
    ----------
    model : nn.Module
        The original (dense) architecture; modified in place.
    state_dict : Mapping[str, Any]
        A compressed model's ``state_dict()``.
    strict : bool
        Passed to ``load_state_dict``.

    Returns
    -------
    nn.Module
        ``model``.

    Raises
    ------
    RuntimeError
        From ``load_state_dict``: missing or unexpected keys (with ``strict``), shape mismatches.
    AttributeError
        A recorded layer name that ``model`` does not have (``get_submodule``).

    Examples
    --------
    >>> _ = torch.manual_seed(0)
    >>> model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
    >>> _ = sketch_model(model, low_rank=4)
    >>> fresh = restore_model(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)),
    ...                       model.state_dict())
    >>> type(fresh[0]).__name__
    'LowRankLinear'
    >>> x = torch.randn(3, 16)
    >>> torch.equal(fresh(x), model(x))
    True
    """
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
            set_module(model, name, attention)
            continue
        if cls is SKConv2d:
            new: nn.Module = SKConv2d(config["in_channels"], config["out_channels"], tuple(config["kernel_size"]),
                                      tuple(config["stride"]), tuple(config["padding"]), config["bias"],
                                      config["num_terms"], config["low_rank"], dilation=tuple(config["dilation"]),
                                      **placement)
        elif cls is Int8LowRankLinear:  # the saved int8 factors, as they are (no dense weight)
            new = Int8LowRankLinear(config["in_features"], config["out_features"], config["rank"], bias=config["bias"],
                                    activation=config["activation"], inner_activation=config.get("inner_activation"),
                                    device=placement.get("device")).train(old.training)  # it refuses training mode
        elif cls is SKLinear:
            new = SKLinear(config["in_features"], config["out_features"], config["num_terms"], config["low_rank"],
                           bias=config["bias"], activation=config["activation"], dropout=config["dropout"],
                           init="linear", **placement)  # the cheapest init: the state_dict replaces the factors
            new.init = config.get("init", "panther")
        else:
            new = LowRankLinear(config["in_features"], config["out_features"], config["rank"], bias=config["bias"],
                                activation=config["activation"], dropout=config.get("dropout", 0.0),
                                inner_activation=config.get("inner_activation"), **placement)
        set_module(model, name, new)
    no_fused_encoders(model)
    model.load_state_dict(state_dict, strict=strict)
    return model
