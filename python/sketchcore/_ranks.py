"""Ranks: the one rule every path that *chooses* a rank follows (``sketch_model``'s
``param_ratio``/``tolerance``/``calibration``, the tuner's search spaces, ``sketchcore convert``),
the one rank-from-spectrum routine and the one parameter count of a factored layer. Pure
Python (no torch): conversion, the tuner and the CLI all stand on it.

Why the alignment: a GEMM whose inner width is not a multiple of 16 bytes (8 bf16/fp16
elements) falls off the tensor-core kernels (docs/performance_results.md has the figures), and
widths that are multiples of 64 fill whole tiles. So a chosen rank is a multiple of 64 once it
is large (from 256, where rounding to 64 gives up at most a fifth of the rank), else a multiple
of 16; a rank below 16 (a tiny layer, where alignment cannot matter) stays as it is. A rank the
*user* fixes is never changed: the core pads what it owns so that any rank runs on the fast
kernels.

Budgets are never exceeded: sizing by ``param_ratio`` rounds *down*; sizing by ``tolerance``
rounds *up* (the error only falls with the rank) while the layer stays smaller than dense.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

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


def factored_size(n_in: int, n_out: int, rank: int, bias: bool = False) -> int:
    """Numbers a factored map in → out of ``rank`` stores: rank·(in + out), plus ``out`` for a
    bias. The one parameter count of the package: a LowRankLinear of rank r is
    ``factored_size(in, out, r, bias)``; Panther's SKLinear of T terms of rank k learns
    ``factored_size(in, out, T·k)`` and stores, with its fixed sketches, ``factored_size(in,
    out, 2·T·k, bias)`` (an SKConv2d too, ``in`` its patch width in·kh·kw).

    >>> factored_size(64, 32, 4), factored_size(64, 32, 4, bias=True)
    (384, 416)
    """
    return rank * (n_in + n_out) + (n_out if bias else 0)


def largest_saving_rank(dense: int, per_rank: int, fixed: int, most: int) -> int:
    """The largest rank (at most ``most``) whose layer, storing ``rank·per_rank + fixed``
    numbers, stores fewer than ``dense``; 0 or less when none does.

    >>> largest_saving_rank(64 * 64 + 64, 128, 64, 64), largest_saving_rank(10, 128, 0, 64)
    (31, 0)
    """
    return min(most, (dense - fixed - 1) // per_rank)


def truncation_errors(energies: Sequence[float]) -> list[float]:
    """``errors[r]`` for r = 0 … n: the relative error √(Σ_{i ≥ r} e_i / Σ_i e_i) of keeping the
    first r of ``energies`` (largest first: squared singular values, or their output-weighted
    energies; negative rounding counts as 0). All 0 when the energies sum to 0.

    >>> [round(e, 4) for e in truncation_errors([9.0, 4.0, 0.0])]
    [1.0, 0.5547, 0.0, 0.0]
    """
    tail = [0.0]
    for energy in reversed(energies):
        tail.append(tail[-1] + max(float(energy), 0.0))
    tail.reverse()  # tail[r] = Σ_{i ≥ r} e_i
    total = tail[0]
    return [math.sqrt(t / total) if total > 0 else 0.0 for t in tail]


def rank_for_tolerance(energies: Sequence[float], tolerance: float) -> tuple[int, float]:
    """The smallest rank r ≥ 1 whose truncation error (:func:`truncation_errors`) is at most
    ``tolerance``, and that error; (1, 0.0) when the energies sum to 0. The one
    rank-from-spectrum routine: the weight's SVD (``energies`` = s²) and the whitened one
    (s̃², the output error) both size by it.

    >>> rank_for_tolerance([9.0, 4.0, 1.0], 0.3), rank_for_tolerance([0.0, 0.0], 0.1)
    ((2, 0.2672612419124244), (1, 0.0))
    """
    errors = truncation_errors(energies)
    if errors[0] == 0.0:
        return 1, 0.0
    for rank in range(1, len(errors)):
        if errors[rank] <= tolerance:
            return rank, errors[rank]
    return len(energies), 0.0
