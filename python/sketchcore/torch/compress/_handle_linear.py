"""The linear maps' handler: ``nn.Linear``, ``transformers``' ``Conv1D`` and the types given to
``register_linear`` become a ``LowRankLinear`` or an ``SKLinear`` sized by the plan, with
factors from the weight's SVD or, with calibration, from the whitened truncation."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional

from torch import Tensor, nn

from sketchcore.torch.compress import _whitened
from sketchcore.torch.compress._convert_linear import build, dense_equivalent
from sketchcore.torch.compress._global import Choice
from sketchcore.torch.compress._handlers import Handler, Job, Selection, Skip
from sketchcore.torch.compress._plan import ConversionPlan
from sketchcore.torch.compress._registry import read_linear, spec_of, unregistered_subclass
from sketchcore.torch.compress._report import LayerReport
from sketchcore.torch.compress._surgery import tied_reason
from sketchcore.torch.layers import _factors


@dataclass(frozen=True)
class LinearJob(Job):
    M: Tensor  # in × out
    bias: Optional[Tensor]
    choice: Optional[Choice] = None  # the global allocation's, when there is one

    def chosen(self, choice: Choice) -> LinearJob:
        """The same job with the global allocation's choice."""
        return replace(self, choice=choice)

    @property
    def gram_width(self) -> Optional[int]:
        return self.M.shape[0]


class LinearHandler(Handler):
    def claims(self, module: nn.Module, plan: ConversionPlan) -> bool:
        return not plan.attention_only and (spec_of(module) is not None or unregistered_subclass(module) is not None)

    def select(self, name: str, module: nn.Module, plan: ConversionPlan, shared: dict[int, list[str]]) -> Selection:
        spec = spec_of(module)
        if spec is None:
            return Skip(name, unregistered_subclass(module) or "")
        try:
            M, bias = read_linear(module, spec)
        except ValueError as error:
            return LayerReport.kept_dense(name, module, str(error))
        n_in, n_out = M.shape
        reason = tied_reason(getattr(module, spec.weight), f"{name}.{spec.weight}", shared)
        if reason and plan.tied == "keep":
            return LayerReport.kept_dense(name, module, reason, in_features=n_in, out_features=n_out,
                                          flops=2 * n_in * n_out)
        return LinearJob(name, module, self, M, bias)

    def convert(self, job: Job, plan: ConversionPlan, gram: Optional[Tensor]) -> tuple[Optional[nn.Module], LayerReport]:
        assert isinstance(job, LinearJob)
        M = job.M
        n_in, n_out = M.shape
        dense_flops = 2 * n_in * n_out

        def kept(reason: str) -> tuple[None, LayerReport]:
            return None, LayerReport.kept_dense(job.name, job.module, reason, in_features=n_in, out_features=n_out,
                                                flops=dense_flops)

        if plan.calibrated and gram is None:
            return kept("never called on the calibration inputs")
        if job.choice is not None:
            option = job.choice.option
            if option.kind == "dense":
                return None, _with_choice(kept("the global allocation keeps it dense")[1], job.choice)
            if option.kind == "int8":
                return _full_rank_int8(job, plan, gram)
            rank, Vt = option.rank, job.choice.Vt
        else:
            s, Vt = _whitened.whitened_svd(M, gram) if gram is not None else (None, None)
            rank, reason = plan.rank(n_in, n_out, plan.layer, _needed_rank(M, s, plan.tolerance))
            if reason:
                return kept(reason)
        if plan.layer == "lowrank":
            rank = min(rank, n_in, n_out)
            flops = 2 * rank * (n_in + n_out)
        else:
            assert plan.num_terms is not None
            flops = 2 * 2 * plan.num_terms * rank * (n_in + n_out)
        new = build(M, job.bias, plan.layer, rank, plan.num_terms, plan.init, Vt, M.dtype, M.device,
                    dict(plan.layer_options))
        approximation = dense_equivalent(new)
        # init="random" approximates no weight (a model to pretrain): its weight error is unknown (NaN).
        weight_error = math.nan if plan.init == "random" else _factors.relative_error(approximation, M)
        output_error = _whitened.output_error(approximation, M, gram) if gram is not None else None
        row = LayerReport.replacement(job.name, job.module, new, rank=rank, flops_before=dense_flops,
                                      flops_after=flops, weight_error=weight_error, output_error=output_error,
                                      in_features=n_in, out_features=n_out)
        return new, _with_choice(row, job.choice)


def _needed_rank(M: Tensor, whitened: Optional[Tensor], tolerance: Optional[float]) -> Optional[int]:
    """The smallest rank meeting ``tolerance`` (None when not sizing by it): on the outputs
    from the whitened singular values, else on the weight."""
    if tolerance is None:
        return None
    if whitened is not None:
        return _whitened.rank_for_output_tolerance(whitened, tolerance)[0]
    return _factors.rank_for_tolerance(M, tolerance)[0]


def _with_choice(row: LayerReport, choice: Optional[Choice]) -> LayerReport:
    """``row`` with the global allocation's choice and predicted error (unchanged without one)."""
    if choice is not None:
        row.choice = choice.option.kind
        row.predicted_error = choice.predicted_error
    return row


def _full_rank_int8(job: LinearJob, plan: ConversionPlan, gram: Optional[Tensor]) -> tuple[nn.Module, LayerReport]:
    """The global allocation's full-rank int8 layer: the dense weight in int8 (one int8 GEMM)."""
    from sketchcore.torch.layers._int8_linear import Int8Linear

    M = job.M
    n_in, n_out = M.shape
    new = Int8Linear.from_matrix(M, job.bias, activation=plan.layer_options.get("activation"))
    approximation = new.dequantized_weight().to(M.dtype)  # in × out
    output_error = _whitened.output_error(approximation, M, gram) if gram is not None else None
    row = LayerReport.replacement(job.name, job.module, new, rank=min(n_in, n_out), flops_before=2 * n_in * n_out,
                                  flops_after=2 * n_in * n_out,
                                  weight_error=_factors.relative_error(approximation, M), output_error=output_error,
                                  in_features=n_in, out_features=n_out)
    row.quantize = "int8"
    return new, _with_choice(row, job.choice)
