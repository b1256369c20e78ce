"""Compressing a trained model: ``sketch_model`` replaces its linear maps (``nn.Linear``,
``transformers``' ``Conv1D``, any type given to ``register_linear``), and on request its
convolutions and attention, by sketched layers — by fixed size, parameter ratio or error
tolerance, from the weights or from calibration data — and returns a report.

Data flows one way: the arguments become a frozen :class:`ConversionPlan` (validated once, it
chooses the ranks); each matched module goes to the handler of its kind, which selects it and
later converts it; the report is built from the rows the handlers return."""
from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Iterable, Literal, Optional, Union

import torch  # noqa: F401 - the docstring examples use it
from torch import Tensor, nn

from sketchcore.torch.compress import _calibrate, _calibration
from sketchcore.torch.compress._handle_attention import AttentionHandler
from sketchcore.torch.compress._handle_conv import ConvHandler
from sketchcore.torch.compress._global import allocate_layers
from sketchcore.torch.compress._handle_linear import LinearHandler, LinearJob
from sketchcore.torch.compress._handlers import Job, Skip, handler_for, handlers, register_handler
from sketchcore.torch.compress._plan import ConversionPlan
from sketchcore.torch.compress._quantize import Fp8Config, Int8Config, quantize_layers
from sketchcore.torch.compress._registry import register_linear
from sketchcore.torch.compress._report import ConversionReport, LayerReport
from sketchcore.torch.compress._restore import restore_model
from sketchcore.torch.compress._surgery import parameter_names, replace, set_module

__all__ = ["ConversionReport", "LayerReport", "register_linear", "restore_model", "sketch_model"]

#: Without a tolerance, Performer attention measured on calibration inputs warns above this
#: relative output error.
ATTENTION_WARNING = 0.1

# The order in which handlers claim a module and convert their modules (the report's order).
for _handler in (AttentionHandler(), LinearHandler(), ConvHandler()):
    register_handler(_handler)


def sketch_model(model: nn.Module, num_terms: Optional[int] = None, low_rank: Optional[int] = None, *,
                 tolerance: Optional[float] = None, param_ratio: Optional[float] = None,
                 layer: Optional[Literal["sklinear", "lowrank"]] = None, include: Optional[Iterable[str]] = None,
                 exclude: Optional[Iterable[str]] = None, init: str = "svd", conv2d: bool = False,
                 attention: Optional[int] = None, calibration: Optional[Iterable[Any]] = None,
                 tied: Literal["keep", "untie"] = "keep", inner_activation: Optional[str] = None,
                 quantize: Union[Literal["int8", "fp8"], Int8Config, Fp8Config, None] = None, allocation: Literal["uniform", "global"] = "uniform",
                 bytes_ratio: Optional[float] = None, **kwargs: Any) -> ConversionReport:
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

    Global allocation: ``allocation="global"`` (with calibration inputs and ``layer="lowrank"``)
    spends one budget over all the calibrated linear layers instead of giving each the same
    ratio: ``param_ratio`` of their weights' parameters, or ``bytes_ratio`` of their float32
    bytes. Each layer may stay dense or become low rank at any aligned rank; with
    ``bytes_ratio`` and ``quantize="int8"`` its options are int8 instead: low-rank int8
    (:class:`Int8LowRankLinear`) or its full-rank weight in int8 (:class:`Int8Linear`, one int8
    GEMM), besides staying dense. The choice minimises the model's predicted output error: each
    layer's error at each rank comes from its whitened spectrum (int8's from its weight and
    input rows), weighted by how much an error on that layer's output moves the model's output,
    measured by a gradient probe on a few calibration batches (a layer that does not reach the
    model's first output, e.g. BERT's unused pooler, costs nothing to shrink and gets the
    smallest option). The budget is never exceeded. Each report row gives the layer's
    ``choice`` and ``predicted_error`` (its share of the model's predicted error);
    ``report.budget`` and ``report.predicted_output_error`` the totals. ``allocation="uniform"``
    (the default) sizes each layer alone.

    Tied weights: a layer whose weight is also used elsewhere (an ``lm_head`` tied to the
    input embedding, a module registered twice) is kept and listed in ``report.kept`` with the
    names it is tied to; ``tied="untie"`` converts it anyway (the other users keep the dense
    weight, so the model grows).

    Quantization: ``quantize="int8"`` ends the conversion with :func:`quantize_` — every new
    LowRankLinear/SKLinear becomes an :class:`Int8LowRankLinear` (int8 factors, inference on
    the CPU; the report's rows say ``quantize="int8"``); ``quantize="fp8"`` makes
    :class:`Fp8LowRankLinear` layers (e4m3 factors, inference on CUDA only, behind the gated path
    ``cuda_fp8_factors``); the config objects :class:`Int8Config` and :class:`Fp8Config` are
    accepted too. Layers kept dense stay ``nn.Linear``: ``quantize_(model, Int8Config(dense=True))``
    afterwards turns them into :class:`Int8Linear` (sketchcore's int8 GEMM on the full-rank weight).

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
    calibration : iterable or Calibration, optional
        Model inputs for output-error-aware conversion and measurement, or a
        :class:`Calibration` built once on the model (or the model it was copied from) and
        reused by several conversions.
    tied : {"keep", "untie"}
    inner_activation : {"none", "relu", "gelu", "gelu_tanh", "silu"}, optional
        σ on each new LowRankLinear's rank-wide intermediate (needs ``init="random"``).
    quantize : {"int8", "fp8"}, Int8Config or Fp8Config, optional
        Quantize the new low-rank layers (:func:`quantize_`); None keeps them float. With
        ``allocation="global"`` and ``bytes_ratio``: the layers' options are int8 ones.
    allocation : {"uniform", "global"}
        Size each layer alone, or spend one budget over all calibrated layers (see above).
    bytes_ratio : float, optional
        With ``allocation="global"``: the budget as a ratio, in (0, 1], of the layers' float32
        bytes (instead of ``param_ratio``).
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
        ``layer="sklinear"`` or with calibration inputs; an unknown ``quantize``; an unknown
        ``allocation``; ``bytes_ratio`` outside (0, 1] or without ``allocation="global"``;
        ``allocation="global"`` without a budget (``param_ratio``/``bytes_ratio``), without
        calibration inputs, with ``layer="sklinear"``, ``init`` other than ``"svd"`` or
        ``quantize="fp8"``; a budget smaller than every layer at its smallest option. The new layers'
        constructors raise on bad ``kwargs``.
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
    ValueError: sketch_model: expected exactly one of low_rank, tolerance, param_ratio and bytes_ratio ...
    """
    if not isinstance(model, nn.Module):
        hint = " (a state_dict: build the model, load it, and pass the model)" if isinstance(model, Mapping) else ""
        raise TypeError(f"sketch_model: model: expected a torch.nn.Module, got {type(model).__name__}{hint}")
    plan = ConversionPlan.of(num_terms=num_terms, low_rank=low_rank, tolerance=tolerance, param_ratio=param_ratio,
                             layer=layer, include=include, exclude=exclude, init=init, conv2d=conv2d,
                             attention=attention, calibrated=calibration is not None, tied=tied,
                             inner_activation=inner_activation, layer_options=kwargs, quantize=quantize,
                             allocation=allocation, bytes_ratio=bytes_ratio)
    batches = _calibration.calibration_of(calibration) if calibration is not None else None
    return convert(model, plan, batches)


def convert(model: nn.Module, plan: ConversionPlan, batches: Optional[Sequence[Any]]) -> ConversionReport:
    """Carries out ``plan`` on ``model`` (calibrated on ``batches`` when given) and reports."""
    report = ConversionReport()
    jobs = _select(model, plan, report)
    grams: dict[str, Tensor] = {}
    wanting = {job.name: (job.module, job.gram_width) for job in jobs if job.gram_width is not None}
    if batches is not None and wanting:
        grams = _calibration.grams_for(model, wanting, batches)
    if plan.allocation == "global":
        assert batches is not None, "the plan checked that a global allocation has calibration inputs"
        jobs = _allocate_globally(model, plan, jobs, grams, batches, report)
    for handler in handlers():  # each kind in turn, in registration order
        mine = [job for job in jobs if job.handler is handler]
        for job in mine:
            new, row = handler.convert(job, plan, grams.get(job.name))
            if new is None:
                report.kept.append(row)
                continue
            replace(model, job.name, job.module, new)
            report.replaced[job.name] = row
        if mine:
            handler.finish(model)
    if batches is not None:
        _measure(model, batches, plan.tolerance, report)
    if not report.replaced:
        _warn_nothing_replaced(report, plan)
    if plan.quantize is not None:  # after calibration: the report's errors are the float layers'
        for name in quantize_layers(model, only=set(report.replaced), config=plan.quantize):
            report.replaced[name].quantize = plan.quantize
    return report


def _allocate_globally(model: nn.Module, plan: ConversionPlan, jobs: list[Job], grams: Mapping[str, Tensor],
                       batches: Sequence[Any], report: ConversionReport) -> list[Job]:
    """The jobs with the global allocation's choice for each calibrated linear layer."""
    linear = {job.name: (job.module, job.M, job.bias) for job in jobs if isinstance(job, LinearJob)}
    allocation = allocate_layers(model, linear, grams, batches, param_ratio=plan.param_ratio,
                                 bytes_ratio=plan.bytes_ratio, quantize=plan.quantize)
    report.allocation = "global"
    report.budget = (allocation.unit, allocation.budget, allocation.spent)
    report.predicted_output_error = allocation.predicted_error
    return [job.chosen(allocation.choices[job.name]) if isinstance(job, LinearJob) and job.name in allocation.choices
            else job for job in jobs]


def _select(model: nn.Module, plan: ConversionPlan, report: ConversionReport) -> list[Job]:
    """The jobs of the matched modules, in model order; the kept and skipped ones go to ``report``."""
    shared = parameter_names(model)
    jobs: list[Job] = []
    owners: list[str] = []  # names of selected modules whose children go with them
    for name, module in list(model.named_modules()):
        if not name or not plan.matches(name) or any(name.startswith(owner + ".") for owner in owners):
            continue
        handler = handler_for(module, plan)
        selected = handler.select(name, module, plan, shared) if handler is not None else None
        if isinstance(selected, Job):
            jobs.append(selected)
            if selected.handler.owns_children:
                owners.append(name)
        elif isinstance(selected, LayerReport):
            report.kept.append(selected)
        elif isinstance(selected, Skip):
            report.skipped.append((selected.name, selected.why))
    return jobs


def _warn_nothing_replaced(report: ConversionReport, plan: ConversionPlan) -> None:
    """A conversion that changes nothing is almost always a mistake (a pattern that matches no
    layer, a budget too small for every layer): say so, with the reasons the report holds."""
    if report.kept:
        why = "; ".join(f"{row.name}: {row.reason}" for row in report.kept[:3])
        more = f" (and {len(report.kept) - 3} more)" if len(report.kept) > 3 else ""
        detail = f"every matched layer was kept dense ({why}{more})"
    else:
        include = list(plan.include) if plan.include is not None else None
        detail = (f"no convertible layer matched include={include!r}, exclude={list(plan.exclude)!r}"
                  + (f"; skipped: {', '.join(name for name, _ in report.skipped[:3])}" if report.skipped else ""))
    warnings.warn(f"sketch_model: no layer was replaced: {detail}", UserWarning, stacklevel=4)


def _measure(model: nn.Module, batches: Sequence[Any], tolerance: Optional[float], report: ConversionReport) -> None:
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
                          f"model output error: {report.output_error})", UserWarning, stacklevel=4)
