"""The one rank-from-spectrum routine and the one parameter count (sketchcore._ranks), against
float64 references computed independently (truncations rebuilt from NumPy's SVD, modules'
stored numbers counted), and the tuner's data-aware candidates against the best output error
of their rank."""
from contextlib import nullcontext

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sketchcore import _ranks

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from sketchcore.torch import LowRankLinear, SKLinear  # noqa: E402
from sketchcore.torch.compress import _whitened  # noqa: E402
from sketchcore.torch.layers import _factors  # noqa: E402


def _truncation_errors_reference(M):
    """‖M − M_r‖_F / ‖M‖_F for r = 0 … min(shape), each truncation rebuilt from the SVD."""
    U, s, Vt = np.linalg.svd(M, full_matrices=False)
    norm = np.linalg.norm(M)
    return [np.linalg.norm(M - (U[:, :r] * s[:r]) @ Vt[:r]) / norm for r in range(len(s) + 1)]


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 12), st.integers(1, 12), st.integers(0, 2**31 - 1), st.floats(0.0, 0.99))
def test_rank_for_tolerance_matches_the_rebuilt_truncations(rows, cols, seed, tolerance):
    M = np.random.default_rng(seed).standard_normal((rows, cols))
    reference = _truncation_errors_reference(M)
    s = np.linalg.svd(M, compute_uv=False)
    errors = _ranks.truncation_errors((s * s).tolist())
    np.testing.assert_allclose(errors, reference, atol=1e-12)
    rank, error = _ranks.rank_for_tolerance((s * s).tolist(), tolerance)
    smallest = next(r for r in range(1, len(s) + 1) if reference[r] <= tolerance + 1e-12)
    assert rank == smallest and error == pytest.approx(reference[rank], abs=1e-12)
    # the weight-SVD and whitened sizing call the same routine
    assert _factors.rank_for_tolerance(torch.from_numpy(M), tolerance)[0] == rank
    assert _whitened.rank_for_output_tolerance(torch.from_numpy(s), tolerance)[0] == rank


def test_zero_spectrum_and_negative_rounding():
    assert _ranks.rank_for_tolerance([0.0, 0.0], 0.1) == (1, 0.0)
    assert _ranks.truncation_errors([]) == [0.0]
    # an energy of −1e−18 (rounding) counts as 0: the errors stay real and end at 0
    assert _ranks.truncation_errors([4.0, -1e-18]) == [1.0, 0.0, 0.0]


@pytest.mark.parametrize("n_in, n_out, rank, bias", [(16, 8, 3, True), (8, 24, 5, False), (7, 7, 1, True)])
def test_factored_size_counts_what_the_layers_store(n_in, n_out, rank, bias):
    lowrank = LowRankLinear(n_in, n_out, rank, bias=bias)
    assert _ranks.factored_size(n_in, n_out, rank, bias) == sum(p.numel() for p in lowrank.parameters())
    with pytest.warns(UserWarning) if 2 * 2 * rank * (n_in + n_out) > n_in * n_out else nullcontext():
        sk = SKLinear(n_in, n_out, 2, rank, bias=bias, init="linear")
    stored = sum(t.numel() for t in [*sk.parameters(), *sk.buffers()])
    learnable = sum(p.numel() for p in sk.parameters()) - (n_out if bias else 0)
    assert _ranks.factored_size(n_in, n_out, 2 * 2 * rank, bias) == stored
    assert _ranks.factored_size(n_in, n_out, 2 * rank) == learnable


@pytest.mark.parametrize("rank", [2, 5])
def test_the_tuners_data_aware_candidate_has_the_best_output_error_of_its_rank(rank):
    """With a Gram matrix captured, a Linear layer's candidate of rank r is the whitened
    truncation: its output error on the captured inputs is the tail of the singular values of
    X M (Eckart–Young on the outputs), below that of the weight's own truncation."""
    from sketchcore.tuner import LayerConfig, SKAutoTuner

    generator = torch.Generator().manual_seed(rank)
    layer = nn.Linear(24, 16).double()
    mixing = torch.randn(24, 24, generator=generator, dtype=torch.float64) * torch.logspace(0, -3, 24,
                                                                                           dtype=torch.float64)
    X = torch.randn(200, 24, generator=generator, dtype=torch.float64) @ mixing  # correlated inputs
    model = nn.Sequential(layer)

    def accuracy(m):
        with torch.no_grad():
            m(X)
        return 1.0

    tuner = SKAutoTuner(model, LayerConfig("0", {"rank": [rank]}), accuracy, accuracy_threshold=0.5)
    chosen = tuner.tune()["0"]["best_layer"]
    M = layer.weight.detach().t().numpy()
    N = (chosen.S.detach() @ chosen.U.detach()).numpy()
    Xn = X.numpy()
    error = np.linalg.norm(Xn @ (N - M)) / np.linalg.norm(Xn @ M)
    s = np.linalg.svd(Xn @ M, compute_uv=False)
    best = np.sqrt((s[rank:] ** 2).sum() / (s ** 2).sum())
    assert error == pytest.approx(best, rel=1e-6)
    U, w, Vt = np.linalg.svd(M, full_matrices=False)
    weight_truncation = (U[:, :rank] * w[:rank]) @ Vt[:rank]
    assert error < np.linalg.norm(Xn @ (weight_truncation - M)) / np.linalg.norm(Xn @ M)
