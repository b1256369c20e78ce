"""``CollectiveLog``: torch's ``CommDebugMode`` that also keeps each collective's tensors' shapes
and bytes, so that a test or a benchmark reads what crossed the process group, not what a formula
says should have."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.debug._comm_mode import c10d_collective_ops
from torch.utils._pytree import tree_leaves


@dataclass(frozen=True)
class Collective:
    """One collective call: its operator's name (``"allreduce_"``, ``"all_reduce"``, ...), the
    shapes of its tensor arguments and their bytes."""
    name: str
    shapes: tuple[tuple[int, ...], ...]
    bytes: int


class CollectiveLog(CommDebugMode):
    """``CommDebugMode`` that records every collective in ``calls`` (see :class:`Collective`).

    Examples
    --------
    >>> import torch
    >>> with CollectiveLog() as log:
    ...     _ = torch.ones(2) + 1
    >>> log.calls, log.get_total_counts()
    ([], 0)
    """

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[Collective] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = super().__torch_dispatch__(func, types, args, kwargs)
        packet = getattr(func, "_overloadpacket", None)
        if out is not NotImplemented and (packet in self.comm_registry or packet in c10d_collective_ops):
            tensors = [t for t in tree_leaves((args, kwargs or {})) if isinstance(t, torch.Tensor)]
            self.calls.append(Collective(packet.__name__, tuple(tuple(t.shape) for t in tensors),
                                         sum(t.numel() * t.element_size() for t in tensors)))
        return out

    @property
    def total_bytes(self) -> int:
        """The bytes of all recorded collectives' tensors (per rank)."""
        return sum(c.bytes for c in self.calls)
