"""One handler per kind of layer ``sketch_model`` converts (linear maps, convolutions,
attention), registered in order, the first claiming a module handles it. A handler selects a
matched module (a :class:`Job`, a kept-dense row, a :class:`Skip`) and later converts the job
into a new module and its report row; it reads the plan and returns values, and never records
anything itself."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from torch import Tensor, nn

from sketchcore.torch.compress._plan import ConversionPlan
from sketchcore.torch.compress._report import LayerReport


@dataclass(frozen=True)
class Skip:
    """A matched module that no handler converts, and why (``report.skipped``)."""

    name: str
    why: str


@dataclass(frozen=True)
class Job:
    """A module a handler will convert (handlers add what they read at selection)."""

    name: str
    module: nn.Module
    handler: Handler

    @property
    def gram_width(self) -> Optional[int]:
        """The fan-in whose calibration Gram matrix the conversion uses; None: it uses none."""
        return None


Selection = Union[Job, LayerReport, Skip, None]


class Handler:
    """A kind of layer: which modules it claims, and how it converts them."""

    #: its modules' children are not matched on their own (they go with it)
    owns_children = False

    def claims(self, module: nn.Module, plan: ConversionPlan) -> bool:
        raise NotImplementedError

    def select(self, name: str, module: nn.Module, plan: ConversionPlan, shared: dict[int, list[str]]) -> Selection:
        """A claimed module's job, or its kept-dense row, or a skip. ``shared``: every name of
        each parameter and buffer of the model (to find tied weights)."""
        raise NotImplementedError

    def convert(self, job: Job, plan: ConversionPlan, gram: Optional[Tensor]) -> tuple[Optional[nn.Module], LayerReport]:
        """The new module (None: kept dense) and the job's report row."""
        raise NotImplementedError

    def finish(self, model: nn.Module) -> None:
        """Runs once after the handler's modules were replaced."""


_HANDLERS: list[Handler] = []


def register_handler(handler: Handler) -> None:
    """Adds a handler after those registered before it (an earlier one claims first)."""
    _HANDLERS.append(handler)


def handlers() -> tuple[Handler, ...]:
    return tuple(_HANDLERS)


def handler_for(module: nn.Module, plan: ConversionPlan) -> Optional[Handler]:
    """The first registered handler claiming ``module`` under ``plan``."""
    return next((h for h in _HANDLERS if h.claims(module, plan)), None)
