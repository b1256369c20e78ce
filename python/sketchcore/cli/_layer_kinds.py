"""The layer a user builds, described for the ``landscape`` and ``memory`` subcommands.

``--layer`` says what ``--terms T`` and ``--rank k`` mean:

* ``sklinear`` (the default, Panther's meaning): ``SKLinear(in, out, num_terms=T, low_rank=k)``,
  2T products of rank k — T learnable halves S1s (T, in, k), S2s (T, k, out) and T fixed
  buffers U1s, U2s — run as one packed call over 2T terms with scale 1/(2T); the map has rank
  up to 2Tk (the svd initialisation reaches the best rank-2Tk approximation).
* ``lowrank``: ``LowRankLinear(in, out, rank=k)``, one learnable term (``--terms`` must be 1).
* ``operator``: the raw ``sketched_matmul(x, S, U)`` with T learnable terms of rank k.
"""
from __future__ import annotations

from dataclasses import dataclass

from sketchcore._ranks import factored_size

KINDS = ("sklinear", "lowrank", "operator")
LABELS = {"sklinear": "SKLinear", "lowrank": "LowRankLinear", "operator": "operator"}


@dataclass(frozen=True)
class LayerShape:
    """One configuration of one kind, and what it costs per input row."""

    kind: str
    d_in: int
    d_out: int
    terms: int  #: --terms as the user gave it
    rank: int  #: --rank (k per term)

    @property
    def label(self) -> str:
        return LABELS[self.kind]

    @property
    def operator_terms(self) -> int:
        """Terms of the packed sketched GEMM that runs."""
        return 2 * self.terms if self.kind == "sklinear" else self.terms

    @property
    def scale(self) -> float:
        return 1.0 / self.operator_terms if self.kind == "sklinear" else 1.0

    @property
    def learnable(self) -> int:
        """Learnable factor entries (the bias not counted)."""
        return factored_size(self.d_in, self.d_out, self.terms * self.rank)

    @property
    def buffers(self) -> int:
        """Fixed factor entries (SKLinear's U1s and U2s)."""
        return self.learnable if self.kind == "sklinear" else 0

    @property
    def map_rank(self) -> int:
        """The rank of the dense map the layer can represent."""
        return min(self.operator_terms * self.rank, self.d_in, self.d_out)

    @property
    def flops_per_row(self) -> int:
        return 2 * self.operator_terms * self.rank * (self.d_in + self.d_out)

    def learnable_terms(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """(S terms, U terms) whose gradients a training step computes: SKLinear learns the
        first T terms of the packed S ([S1s; U2s]) and the last T of the packed U ([U1s; S2s])."""
        t = self.operator_terms
        return ((0, self.terms), (self.terms, t)) if self.kind == "sklinear" else ((0, t), (0, t))


def check_kind(kind: str, terms: list[int]) -> str:
    """An error message for a combination that does not describe a layer, else ''."""
    if kind == "lowrank" and terms != [1]:
        return f"--terms: LowRankLinear has one term (its rank is --rank); expected 1, got {' '.join(map(str, terms))}"
    return ""
