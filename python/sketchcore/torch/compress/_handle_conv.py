"""The convolutions' handler (``conv2d=True``): plain ``nn.Conv2d`` layers become ``SKConv2d`` of
the plan's ``num_terms`` and ``init``; those it refuses (groups, padding modes) are kept."""
from __future__ import annotations

from typing import Optional

from torch import Tensor, nn

from sketchcore.torch.compress._handlers import Handler, Job, Selection
from sketchcore.torch.compress._plan import ConversionPlan
from sketchcore.torch.compress._report import LayerReport
from sketchcore.torch.layers import _factors
from sketchcore.torch.layers._conv import SKConv2d, _check_convertible


class ConvHandler(Handler):
    def claims(self, module: nn.Module, plan: ConversionPlan) -> bool:
        return plan.conv2d and type(module) is nn.Conv2d

    def select(self, name: str, module: nn.Module, plan: ConversionPlan, shared: dict[int, list[str]]) -> Selection:
        return Job(name, module, self)  # its refusals are decided when converting, as its rank

    def convert(self, job: Job, plan: ConversionPlan, gram: Optional[Tensor]) -> tuple[Optional[nn.Module], LayerReport]:
        conv = job.module
        assert isinstance(conv, nn.Conv2d) and plan.num_terms is not None
        M = conv.weight.detach().reshape(conv.out_channels, -1).t()
        n_in, n_out = M.shape
        dense_flops = 2 * n_in * n_out
        try:
            _check_convertible(conv)  # SKConv2d's own refusals (groups, padding modes)
            needed = _factors.rank_for_tolerance(M, plan.tolerance)[0] if plan.tolerance is not None else None
            rank, reason = plan.rank(n_in, n_out, "skconv2d", needed)
        except ValueError as error:
            rank, reason = 0, str(error)
        if reason:
            return None, LayerReport.kept_dense(job.name, conv, reason, in_features=n_in, out_features=n_out,
                                                flops=dense_flops)
        new = SKConv2d.fromTorch(conv, plan.num_terms, rank, init=plan.init)
        return new, LayerReport.replacement(job.name, conv, new, rank=rank, flops_before=dense_flops,
                                            flops_after=2 * 2 * plan.num_terms * rank * (n_in + n_out),
                                            weight_error=_factors.relative_error(new.weight, conv.weight),
                                            in_features=n_in, out_features=n_out)
