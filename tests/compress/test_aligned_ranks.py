"""Ranks the hardware likes (issue 38, item 1): every path that chooses a rank picks a multiple of
64 from 256, of 16 from 16 (smaller ranks, on tiny layers, stay as they are), never exceeds the
parameter budget it was given, meets the tolerance it was given, and leaves a rank the user fixed
alone. The rule itself is checked against brute force; sketch_model (by ratio, by tolerance, with
calibration), the conversion CLI and the report are checked on real layers."""
import math
import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sketchcore import _ranks

torch = pytest.importorskip("torch")
sct = pytest.importorskip("sketchcore.torch")
from sketchcore.torch.compress._plan import ConversionPlan  # noqa: E402  (needs torch)


def picked(rank):
    """What the rule allows, written out independently of _ranks."""
    if rank < 16:
        return rank >= 1
    return rank % (64 if rank >= 256 else 16) == 0


@given(st.integers(0, 5000))
def test_the_largest_aligned_rank_within_a_budget_is_the_largest_one(limit):
    rank = _ranks.aligned_rank_within(limit)
    brute = max((r for r in range(1, limit + 1) if picked(r)), default=0)
    assert rank == brute and rank <= limit
    assert _ranks.is_aligned(rank) == (rank >= 1)


@given(st.integers(1, 3000), st.one_of(st.none(), st.integers(2, 4000)))
def test_the_smallest_aligned_rank_at_least_the_need_is_the_smallest_one(needed, below):
    rank = _ranks.aligned_rank_at_least(needed, below)
    fits = [r for r in range(needed, below if below is not None else needed + 64) if r >= 16 and r % 16 == 0]
    if not fits:  # nothing aligned fits under dense: a tiny need as it is, else None (stay dense)
        assert rank == (needed if needed < 16 else None)
        return
    multiples_of_64 = [r for r in fits if r % 64 == 0]
    # Large needs take the first multiple of 64 that fits, else (and for small needs) of 16.
    expected = multiples_of_64[0] if needed >= 256 and multiples_of_64 else fits[0]
    assert rank == expected and rank >= needed and (below is None or rank < below)


def test_aligned_ranks_lists_exactly_the_picked_ranks():
    for limit in (16, 100, 255, 256, 300, 1000):
        assert _ranks.aligned_ranks(limit) == [r for r in range(16, limit + 1) if picked(r)]
    assert _ranks.aligned_ranks(9) == list(range(1, 10)) and _ranks.aligned_ranks(0) == []


@pytest.mark.parametrize(("n_in", "n_out", "layer", "terms", "ratio", "expected"), [
    (2048, 5632, "lowrank", None, 0.25, 320),   # the issue's layer: 375 within budget
    (2048, 2048, "lowrank", None, 0.25, 256),
    (1024, 2816, "lowrank", None, 0.25, 176),   # 187 within budget
    (2048, 5632, "sklinear", 2, 0.25, 176),     # k per term: 187 within budget
    (5632, 2048, "lowrank", None, 0.5, 704),    # 750
    (64, 64, "lowrank", None, 0.1, 3),          # a tiny layer: 3.2, below any granule
])
def test_param_ratio_picks_the_aligned_rank_the_issue_names(n_in, n_out, layer, terms, ratio, expected):
    rank, reason = ConversionPlan.of(num_terms=terms, param_ratio=ratio, layer=layer).rank(n_in, n_out, layer)
    assert (rank, reason) == (expected, "")
    unit = (n_in + n_out) * (terms or 1)
    assert rank * unit <= ratio * n_in * n_out


def _random_linear(gen, n_in, n_out, bias=True):
    layer = torch.nn.Linear(n_in, n_out, bias=bias)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(n_out, n_in, generator=gen) / math.sqrt(n_in))
    return layer


@settings(max_examples=12, deadline=None)
@given(st.integers(16, 400), st.integers(16, 400), st.floats(0.05, 0.9), st.sampled_from([None, 1, 2]),
       st.integers(0, 2**31 - 1))
def test_sketch_model_by_ratio_never_exceeds_the_budget_and_picks_aligned_ranks(n_in, n_out, ratio, terms, seed):
    gen = torch.Generator().manual_seed(seed)
    model = torch.nn.Sequential(_random_linear(gen, n_in, n_out))
    dense = n_in * n_out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no layer was replaced" where not even rank 1 fits
        report = sct.sketch_model(model, terms, param_ratio=ratio)
    if not report:
        assert report.kept and "no rank ≥ 1 fits" in report.kept[0].reason
        return
    row = report["0"]
    unit = (n_in + n_out) * (terms or 1)
    budget = int(ratio * dense // unit)
    if terms is None:
        budget = min(budget, n_in, n_out)
    assert row.rank == _ranks.aligned_rank_within(budget) and picked(row.rank)
    learnable = sum(p.numel() for p in model[0].parameters()) - n_out  # the bias is copied, not compressed
    assert learnable <= ratio * dense
    assert row.params_after == sum(p.numel() for p in model[0].parameters()) + sum(
        b.numel() for b in model[0].buffers() if terms is None)  # the report counts what the layer holds


def test_sketch_model_by_tolerance_picks_the_smallest_aligned_rank_that_meets_it():
    gen = torch.Generator().manual_seed(int(np.random.default_rng().integers(2**31)))
    n_in, n_out = 384, 320
    s = torch.exp(-torch.arange(1, n_out + 1, dtype=torch.float64) / 40)
    U, _ = torch.linalg.qr(torch.randn(n_out, n_out, generator=gen, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(n_in, n_out, generator=gen, dtype=torch.float64))
    layer = torch.nn.Linear(n_in, n_out, dtype=torch.float64)
    with torch.no_grad():
        layer.weight.copy_((U * s) @ V.T)
    model = torch.nn.Sequential(layer)
    tolerance = 0.05
    row = sct.sketch_model(model, tolerance=tolerance)["0"]

    def error(rank):
        return math.sqrt(float((s[rank:] ** 2).sum() / (s**2).sum()))
    needed = next(r for r in range(1, n_out + 1) if error(r) <= tolerance)
    assert needed % 16 != 0  # the check below then says something: the exact need is not aligned
    assert picked(row.rank) and row.rank == _ranks.aligned_rank_at_least(needed, below=-(-n_in * n_out // (n_in + n_out)))
    assert row.weight_error <= tolerance and row.rank - 16 < needed <= row.rank
    assert row.params_after < n_in * n_out + n_out


def test_calibration_tolerance_picks_an_aligned_rank_meeting_the_output_error():
    gen = torch.Generator().manual_seed(int(np.random.default_rng().integers(2**31)))
    model = torch.nn.Sequential(_random_linear(gen, 256, 192), torch.nn.ReLU(), _random_linear(gen, 192, 256))
    mixing = torch.randn(256, 256, generator=gen) * torch.exp(-torch.arange(256.0) / 30)  # correlated inputs
    batches = [torch.randn(64, 256, generator=gen) @ mixing for _ in range(4)]
    report = sct.sketch_model(model, tolerance=0.1, calibration=batches)
    assert "0" in report  # the first layer's correlated inputs make it compressible
    for row in report.values():
        assert picked(row.rank) and row.rank % 16 == 0 and row.output_error <= 0.1
    for row in report.kept:  # a layer whose aligned rank would not save parameters stays dense, and says why
        assert "not fewer parameters than dense" in row.reason and type(model.get_submodule(row.name)) is torch.nn.Linear


def test_a_rank_the_user_fixes_is_kept_and_runs():
    gen = torch.Generator().manual_seed(0)
    model = torch.nn.Sequential(_random_linear(gen, 96, 80))
    row = sct.sketch_model(model, low_rank=37)["0"]
    assert row.rank == 37 and tuple(model[0].S.shape) == (96, 37) and tuple(model[0].U.shape) == (37, 80)
    layer = sct.LowRankLinear(96, 80, rank=37)
    assert tuple(layer.S.shape) == (96, 37) and set(layer.state_dict()) == {"S", "U", "bias"}
    x = torch.randn(5, 96, dtype=torch.float64)
    reference = x @ layer.S.double() @ layer.U.double() + layer.bias.double()
    torch.testing.assert_close(layer(x.float()).double(), reference, rtol=1e-5, atol=1e-5)


def test_the_conversion_cli_picks_aligned_ranks_and_prints_them(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 384), torch.nn.ReLU(), torch.nn.Linear(384, 512))
    source, target = tmp_path / "model.pt", tmp_path / "small.pt"
    torch.save(model, source)
    done = subprocess.run([sys.executable, "-m", "sketchcore", "convert", str(source), "-o", str(target),
                           "--param-ratio", "0.3"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    state = torch.load(target)
    ranks = {key.split(".")[0]: value.shape[1] for key, value in state.items() if key.endswith(".S")}
    expected = _ranks.aligned_rank_within(int(0.3 * 512 * 384 // (512 + 384)))  # 65 → 64
    assert ranks == {"0": expected, "2": expected} and expected == 64
    assert f" {expected} " in done.stdout  # the report's rank column


def test_the_tuners_auto_spaces_hold_only_aligned_ranks_that_save_numbers():
    from sketchcore.tuner import LayerConfig, ParamsResolver, SKAutoTuner
    from sketchcore.tuner._candidates import candidates, stored
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 384), torch.nn.ReLU(), torch.nn.Linear(384, 12),
                                torch.nn.Conv2d(64, 96, 3))
    for name in ("0", "2"):
        layer = model.get_submodule(name)
        found = candidates(layer, name, "auto", copy_weights=False)
        ranks = [c.params["rank"] for c in found]
        limit = (stored(layer) - layer.out_features - 1) // (layer.in_features + layer.out_features)
        assert sorted(ranks) == [r for r in range(1, min(limit, 12) + 1)] if name == "2" else \
            sorted(ranks) == [r for r in range(16, limit + 1) if picked(r)]
        assert all(c.size < stored(layer) for c in found)
    conv = candidates(model[3], "3", "auto", copy_weights=False)
    assert conv and all(picked(c.params["low_rank"]) for c in conv)
    spaces = ParamsResolver(model).resolve(LayerConfig(["0"], "auto"))
    assert spaces[0].params["rank"] == [r for r in range(16, 224) if picked(r)]  # 512·384/(896) = 219.4
    tuner = SKAutoTuner(model, LayerConfig(["0"], "auto"), lambda m: 1.0, accuracy_threshold=0.5)
    tuner.tune()
    chosen = tuner.get_best_params()["0"]["params"]["rank"]
    assert chosen == 16  # every setting is as accurate here: the smallest aligned one
    replaced = SKAutoTuner(model, LayerConfig(["0"], "auto"), lambda m: 1.0).replace_without_tuning(tolerance=0.9)
    assert picked(replaced.get_submodule("0").rank)
