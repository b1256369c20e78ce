"""Ranks the hardware likes: the one rule every path that *chooses* a rank follows
(``sketch_model``'s ``param_ratio``/``tolerance``/``calibration``, the tuner's search spaces,
``sketchcore convert``).

Why: a GEMM whose inner width is not a multiple of 16 bytes (8 bf16/fp16 elements) falls off
the tensor-core kernels. Measured on an H200 (bf16, 4096 rows, 2048 → 5632): rank 375 took
0.24 ms on a legacy sm_75 kernel, rank 376 0.055 ms. Widths that are multiples of 64 fill whole
tiles. So a chosen rank is a multiple of 64 once it is large (from 256, where rounding to 64
gives up at most a fifth of the rank), else a multiple of 16; a rank below 16 (a tiny layer,
where alignment cannot matter) stays as it is. A rank the *user* fixes is never changed: the
core pads what it owns so that any rank runs on the fast kernels.

Budgets are never exceeded: sizing by ``param_ratio`` rounds *down*; sizing by ``tolerance``
rounds *up* (the error only falls with the rank) while the layer stays smaller than dense.
"""
from __future__ import annotations

from typing import Optional

#: Chosen ranks from this one on are multiples of LARGE_GRANULE.
LARGE_FROM = 256
LARGE_GRANULE = 64
#: Chosen ranks from SMALL_GRANULE up to LARGE_FROM are multiples of it.
SMALL_GRANULE = 16


def rank_granule(rank: int) -> int:
    """The multiple a chosen rank of about this size is rounded to: 64 from 256, 16 from 16,
    1 below 16.

    >>> [rank_granule(r) for r in (5, 16, 255, 256, 1000)]
    [1, 16, 16, 64, 64]
    """
    if rank >= LARGE_FROM:
        return LARGE_GRANULE
    return SMALL_GRANULE if rank >= SMALL_GRANULE else 1


def is_aligned(rank: int) -> bool:
    """Whether ``rank`` is one the rule picks (a multiple of its granule)."""
    return rank >= 1 and rank % rank_granule(rank) == 0


def aligned_rank_within(limit: int) -> int:
    """The largest rank the rule picks that is at most ``limit`` (a parameter budget in units
    of rank); 0 when ``limit`` < 1.

    >>> [aligned_rank_within(r) for r in (0, 7, 20, 187, 256, 375, 1000)]
    [0, 7, 16, 176, 256, 320, 960]
    """
    if limit < 1:
        return 0
    granule = rank_granule(limit)
    return limit - limit % granule


def aligned_rank_at_least(needed: int, below: Optional[int] = None) -> Optional[int]:
    """The smallest rank the rule picks that is at least ``needed`` and, when ``below`` is
    given (the rank at which the layer would be no smaller than dense), less than it: the
    64-multiple for a need from 256, else (or where the 64-multiple reaches ``below``) the
    16-multiple. None when a need of 16 or more has no such rank (the layer should stay dense:
    a few percent of parameters saved is not worth an unaligned GEMM); a need below 16 whose
    16-multiple does not fit is returned as it is (a tiny layer).

    >>> [aligned_rank_at_least(r) for r in (1, 5, 17, 250, 257)]
    [16, 16, 32, 256, 320]
    >>> aligned_rank_at_least(257, below=300), aligned_rank_at_least(5, below=12), aligned_rank_at_least(106, 110)
    (272, 5, None)
    """
    needed = max(needed, 1)
    for granule in (rank_granule(max(needed, SMALL_GRANULE)), SMALL_GRANULE):
        rank = -(-needed // granule) * granule
        if below is None or rank < below:
            return rank
    return needed if needed < SMALL_GRANULE else None


def aligned_ranks(limit: int) -> list[int]:
    """Every rank the rule picks from 1 to ``limit``, ascending: all of them for a layer whose
    largest rank is below 16, else the multiples of 16 below 256 and of 64 from there.

    >>> aligned_ranks(6), aligned_ranks(40), aligned_ranks(400)[-4:]
    ([1, 2, 3, 4, 5, 6], [16, 32], [240, 256, 320, 384])
    """
    if limit < SMALL_GRANULE:
        return list(range(1, limit + 1))
    return [r for r in range(SMALL_GRANULE, limit + 1, SMALL_GRANULE) if is_aligned(r)]
