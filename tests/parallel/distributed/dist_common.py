"""Helpers of the distributed checks: errors against the 1-process result, DTensor unwrapping."""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

#: float32 results of 2 or 4 ranks against one process (the issue's target).
TOLERANCE = 1e-5


def full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if isinstance(t, DTensor) else t


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = full(got).detach().double(), full(want).detach().double()
    assert got.shape == want.shape, f"shape {tuple(got.shape)} != {tuple(want.shape)}"
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


def assert_close(got: torch.Tensor, want: torch.Tensor, what: str, tol: float = TOLERANCE) -> None:
    err = relative_error(got, want)
    assert err <= tol, f"rank {dist.get_rank()}: {what}: relative error {err:.3e} > {tol:g}"


def my_chunk(t: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """This rank's block of ``t`` along ``dim`` (Shard(dim) of an evenly divisible size)."""
    return t.chunk(dist.get_world_size(), dim)[dist.get_rank()]
