"""Randomized linear algebra on sketchcore's own sketch operators.

- :func:`rsvd` / :func:`rangefinder`: the randomized SVD of Halko, Martinsson and Tropp
  (``U, s, Vt``), the building block of the near-optimal conversions of ``sketchcore.torch``.
- :func:`randomized_svd`: Panther's ``randomized_svd(A, k, tol)`` (``U, S, V`` with V, not Vᵀ), a
  blocked randomized QB that stops as soon as the error meets ``tol``.
- :func:`cqrrpt`: Panther's ``cqrrpt(M, gamma)``, randomized Cholesky QR with column pivoting
  (``Q, R, J`` with ``M[:, J] ≈ Q R``), revealing the numerical rank.

The dense steps run in the caller's framework (NumPy/LAPACK, torch on CPU or CUDA, CuPy), so
NumPy in gives NumPy out and torch in gives torch out, on the same device.
"""
from __future__ import annotations

from sketchcore.linalg._backend import SketchKind
from sketchcore.linalg._cqrrpt import cqrrpt
from sketchcore.linalg._randomized_svd import randomized_svd
from sketchcore.linalg._rsvd import rangefinder, rsvd

__all__ = ["SketchKind", "cqrrpt", "randomized_svd", "rangefinder", "rsvd"]
