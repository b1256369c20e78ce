"""The attention handler (``attention=m``): plain ``nn.MultiheadAttention`` modules become
Performer attention with m random features; their projections are copied, so no weight is
approximated (its error is measured on calibration inputs, if any)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from torch import Tensor, nn

from sketchcore.torch.compress._handlers import Handler, Job, Selection
from sketchcore.torch.compress._plan import ConversionPlan
from sketchcore.torch.compress._report import LayerReport
from sketchcore.torch.compress._surgery import no_fused_encoders
from sketchcore.torch.layers._attention import make_performer


@dataclass(frozen=True)
class AttentionJob(Job):
    performer: nn.Module  # built at selection: a module it refuses is kept, with the reason


class AttentionHandler(Handler):
    owns_children = True  # its out_proj goes with it

    def claims(self, module: nn.Module, plan: ConversionPlan) -> bool:
        return plan.attention is not None and type(module) is nn.MultiheadAttention

    def select(self, name: str, module: nn.Module, plan: ConversionPlan, shared: dict[int, list[str]]) -> Selection:
        assert isinstance(module, nn.MultiheadAttention) and plan.attention is not None
        try:
            return AttentionJob(name, module, self, make_performer(module, plan.attention))
        except ValueError as error:
            E = module.embed_dim
            return LayerReport.kept_dense(name, module, str(error), in_features=E, out_features=E,
                                          flops=_projection_flops(E))

    def convert(self, job: Job, plan: ConversionPlan, gram: Optional[Tensor]) -> tuple[Optional[nn.Module], LayerReport]:
        mha = job.module
        assert isinstance(job, AttentionJob) and isinstance(mha, nn.MultiheadAttention) and plan.attention is not None
        E = mha.embed_dim
        flops = _projection_flops(E)
        return job.performer, LayerReport.replacement(job.name, mha, job.performer, rank=plan.attention,
                                                      flops_before=flops, flops_after=flops, weight_error=math.nan,
                                                      in_features=E, out_features=E)

    def finish(self, model: nn.Module) -> None:
        no_fused_encoders(model)


def _projection_flops(E: int) -> int:
    """Per token: the q, k, v and output projections (the attention itself grows with the length)."""
    return 2 * 4 * E * E
