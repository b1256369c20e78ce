"""sketchcore.linalg against the field's standard tools, the pages Panther's own benchmarks show:
``cqrrpt`` against SciPy's pivoted QR (LAPACK GEQP3) and ``torch.linalg.qr`` (unpivoted: the
floor), ``randomized_svd`` against scikit-learn's ``randomized_svd`` and ``torch.linalg.svd``
(exact). Time as paired ratios (baseline / sketchcore), error, and peak memory of the NumPy paths
(tracemalloc: NumPy/SciPy allocations plus sketchcore's pool peak; torch's CPU allocator is not
traced, so its memory is not reported).

Run: pytest bench/test_bench_linalg.py --benchmark-only
"""
import tracemalloc

import numpy as np
import pytest
import torch

from conftest import BOUNDS, INFO
from sketchcore import linalg, memory

scipy_linalg = pytest.importorskip("scipy.linalg")


def peak_mib(fn):
    """Peak bytes allocated during fn (NumPy/SciPy through tracemalloc, sketchcore's pool)."""
    memory.reset_peak()
    before = memory.stats()["current_bytes"]
    tracemalloc.start()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return (peak + max(0, memory.stats()["peak_bytes"] - before)) / 2**20


def numerically_low_rank(rng, m, n, rank):
    A = rng.standard_normal((m, rank)) @ rng.standard_normal((rank, n))
    return A + 1e-13 * np.linalg.norm(A) / np.sqrt(m * n) * rng.standard_normal((m, n))


@pytest.mark.parametrize("m, n, rank", [(20000, 200, 200), (50000, 200, 60)])
def test_cqrrpt_vs_pivoted_qr(m, n, rank, paired):
    rng = np.random.default_rng(m + n)
    A = rng.standard_normal((m, n)) if rank == n else numerically_low_rank(rng, m, n, rank)
    Q, R, J = linalg.cqrrpt(A, seed=1)
    error = np.linalg.norm(A[:, J] - Q @ R) / np.linalg.norm(A)
    orth = np.linalg.norm(Q.T @ Q - np.eye(Q.shape[1]))
    Qs, Rs, Js = scipy_linalg.qr(A, mode="economic", pivoting=True)
    error_scipy = np.linalg.norm(A[:, Js] - Qs @ Rs) / np.linalg.norm(A)
    assert Q.shape[1] == rank and error <= 1e-10 and orth <= 1e-8
    shape = f"{m}x{n} rank {rank}"
    INFO[f"cqrrpt {shape}"] = (f"rank found {Q.shape[1]}, relative error {error:.1e} (GEQP3 {error_scipy:.1e}), "
                               f"‖QᵀQ − I‖ {orth:.1e}; peak memory {peak_mib(lambda: linalg.cqrrpt(A, seed=1)):.0f} "
                               f"MiB vs GEQP3 "
                               f"{peak_mib(lambda: scipy_linalg.qr(A, mode='economic', pivoting=True)):.0f} MiB")
    paired("cqrrpt", shape, "scipy qr(pivoting=True)", lambda: linalg.cqrrpt(A, seed=1),
           lambda: scipy_linalg.qr(A, mode="economic", pivoting=True), pairs=3, calls=1)


@pytest.mark.parametrize("m, n", [(20000, 200)])
def test_cqrrpt_vs_torch_qr(m, n, paired):
    """The floor: torch's unpivoted Householder QR (pytest-benchmark allows one comparison per test)."""
    At = torch.from_numpy(np.random.default_rng(m).standard_normal((m, n)))
    paired("cqrrpt", f"{m}x{n} (torch)", "torch.linalg.qr (no pivoting)", lambda: linalg.cqrrpt(At, seed=1),
           lambda: torch.linalg.qr(At), pairs=3, calls=1)


def decaying(rng, m, n, decay):
    s = np.arange(1, min(m, n) + 1, dtype=np.float64) ** -decay
    U, _ = np.linalg.qr(rng.standard_normal((m, len(s))))
    V, _ = np.linalg.qr(rng.standard_normal((n, len(s))))
    return (U * s) @ V.T, s


@pytest.mark.parametrize("m, n, k", [(4000, 1000, 20), (4000, 1000, 100)])
def test_randomized_svd_vs_scikit_learn_and_exact(m, n, k, paired):
    from sklearn.utils.extmath import randomized_svd as sk_randomized_svd
    rng = np.random.default_rng(k)
    A, s = decaying(rng, m, n, 1.0)
    optimal = np.sqrt(np.sum(s[k:] ** 2))
    U, S, V = linalg.randomized_svd(A, k, 0.0, seed=1)
    ours = np.linalg.norm(A - (U * S) @ V.T) / optimal
    Us, Ss, Vts = sk_randomized_svd(A, k, random_state=1)
    theirs = np.linalg.norm(A - (Us * Ss) @ Vts) / optimal
    BOUNDS[f"randomized_svd {m}x{n} k={k}: error / optimal"] = (ours, 1.05, "×", "≤")
    shape = f"{m}x{n} k={k}"
    mine = peak_mib(lambda: linalg.randomized_svd(A, k, 0.0, seed=1))
    sk = peak_mib(lambda: sk_randomized_svd(A, k, random_state=1))
    INFO[f"randomized_svd {shape}"] = (f"error / optimal {ours:.4f} (scikit-learn {theirs:.4f}); peak memory "
                                       f"{mine:.0f} MiB vs scikit-learn {sk:.0f} MiB")
    paired("randomized_svd", shape, "sklearn randomized_svd", lambda: linalg.randomized_svd(A, k, 0.0, seed=1),
           lambda: sk_randomized_svd(A, k, random_state=1), pairs=3, calls=1)


@pytest.mark.parametrize("m, n, k", [(4000, 1000, 20)])
def test_randomized_svd_vs_torch_svd(m, n, k, paired):
    A, _ = decaying(np.random.default_rng(k), m, n, 1.0)
    At = torch.from_numpy(A)
    shape = f"{m}x{n} k={k}"
    paired("randomized_svd", f"{shape} (torch)", "torch.linalg.svd (exact)",
           lambda: linalg.randomized_svd(At, k, 0.0, seed=1), lambda: torch.linalg.svd(At, full_matrices=False),
           pairs=3, calls=1)
