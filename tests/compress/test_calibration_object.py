"""``Calibration``: one calibration pass serving several conversions. Layers fed the same input
share one Gram tensor and one factorisation (counted), shared factors equal unshared ones, a
Calibration converts exactly as the batches it holds, serves deep copies, measures against the
outputs it kept (one pass over the batches), and refuses what it cannot serve."""
import copy
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
sct = pytest.importorskip("sketchcore.torch")
nn = torch.nn

from sketchcore.torch.compress import _calibrate, _whitened  # noqa: E402


class Attention(nn.Module):
    """q, k, v read the block's input; gate and up read the normalised input; down reads their
    product; o reads the attention mixture."""

    def __init__(self, d=12, ffn=20, dtype=torch.float64):
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(d, d, dtype=dtype) for _ in range(3))
        self.o = nn.Linear(d, d, dtype=dtype)
        self.norm = nn.LayerNorm(d, dtype=dtype)
        self.gate, self.up = nn.Linear(d, ffn, dtype=dtype), nn.Linear(d, ffn, dtype=dtype)
        self.down = nn.Linear(ffn, d, dtype=dtype)

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
        x = x + self.o(weights @ v)
        h = self.norm(x)
        return x + self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(int(np.random.default_rng().integers(2**31)))


def model_and_batches(gen, dtype=torch.float64, blocks=2, batches=3):
    torch.manual_seed(int(torch.randint(2**31, (1,), generator=gen)))
    model = nn.Sequential(*(Attention(dtype=dtype) for _ in range(blocks)))
    scale = torch.exp(torch.linspace(-2, 1, 12, dtype=torch.float64))
    data = [(torch.randn(2, 7, 12, generator=gen, dtype=torch.float64) * scale).to(dtype) for _ in range(batches)]
    return model, data


def factors(model):
    return {name: {key: value.detach().clone() for key, value in module.state_dict().items()}
            for name, module in model.named_modules() if isinstance(module, sct.LowRankLinear)}


def assert_same_factors(a, b, exact=True):
    assert a.keys() == b.keys() and a
    for name in a:
        for key in a[name]:
            if exact:
                torch.testing.assert_close(a[name][key], b[name][key], rtol=0, atol=0)
            else:
                torch.testing.assert_close(a[name][key], b[name][key])


def test_layers_fed_the_same_input_share_one_gram_tensor(gen):
    model, data = model_and_batches(gen)
    cal = sct.Calibration(model, data)
    grams = cal.grams
    for block in ("0", "1"):
        assert grams[f"{block}.q"] is grams[f"{block}.k"] is grams[f"{block}.v"]
        assert grams[f"{block}.gate"] is grams[f"{block}.up"]
        assert grams[f"{block}.o"] is not grams[f"{block}.q"] and grams[f"{block}.down"] is not grams[f"{block}.up"]
    assert len({id(g) for g in grams.values()}) == 8  # 4 distinct inputs per block
    # each is the float64 XᵀX of what the layer received
    seen = []
    handle = model[0].q.register_forward_pre_hook(lambda module, args: seen.append(args[0].reshape(-1, 12)))
    with torch.no_grad():
        for x in data:
            model(x)
    handle.remove()
    X = torch.cat(seen)
    torch.testing.assert_close(grams["0.q"], X.t() @ X)


def test_factorisation_runs_once_per_distinct_input_across_conversions(gen, monkeypatch):
    model, data = model_and_batches(gen)
    calls = []
    factorise = _whitened.factorise
    monkeypatch.setattr(_whitened, "factorise", lambda gram: calls.append(gram.shape[0]) or factorise(gram))
    cal = sct.Calibration(model, data)
    sct.sketch_model(copy.deepcopy(model), low_rank=3, calibration=cal)
    assert sorted(calls) == [12] * 6 + [20] * 2  # per block: (q,k,v), o, (gate,up), down
    sct.sketch_model(copy.deepcopy(model), low_rank=5, calibration=cal)
    assert len(calls) == 8  # the second conversion reuses every factor
    calls.clear()
    sct.sketch_model(copy.deepcopy(model), low_rank=3, calibration=data)  # plain batches: shared per conversion
    assert sorted(calls) == [12] * 6 + [20] * 2


def test_shared_factors_equal_unshared_ones(gen):
    """float64: the factors of q, k, v from one shared factorisation equal those from a fresh
    factorisation of a private copy of the Gram matrix."""
    model, data = model_and_batches(gen)
    cal = sct.Calibration(model, data)
    for name in ("0.q", "0.k", "0.v", "1.gate", "1.up"):
        M = getattr(model.get_submodule(name), "weight").detach().t()
        shared = _whitened.whitened_svd(M, cal.grams[name])
        private = _whitened.whitened_svd(M, cal.grams[name].clone())
        for a, b in zip(shared, private):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    shared_model = copy.deepcopy(model)
    sct.sketch_model(shared_model, low_rank=4, calibration=cal)
    unshared = copy.deepcopy(model)
    grams = {name: g.clone() for name, g in cal.grams.items()}  # one tensor per layer
    for name, gram in grams.items():
        M = unshared.get_submodule(name).weight.detach().t()
        s, Vt = _whitened.whitened_svd(M, gram)
        A, B = _whitened.lowrank_factors(M, Vt, 4)
        new = shared_model.get_submodule(name)
        torch.testing.assert_close(new.S.detach(), A, rtol=0, atol=0)
        torch.testing.assert_close(new.U.detach(), B, rtol=0, atol=0)


@pytest.mark.parametrize("kwargs", [{"low_rank": 3}, {"tolerance": 0.3}, {"param_ratio": 0.5},
                                    {"low_rank": 2, "layer": "sklinear", "num_terms": 1}])
def test_a_calibration_converts_as_its_batches_and_serves_deep_copies(gen, kwargs):
    model, data = model_and_batches(gen)
    cal = sct.Calibration(model, data)
    assert len(cal) == 3 and cal[1] is data[1] and "3 batches" in repr(cal)
    from_batches = copy.deepcopy(model)
    report_batches = sct.sketch_model(from_batches, calibration=data, **kwargs)
    first, second = copy.deepcopy(model), copy.deepcopy(model)
    report_first = sct.sketch_model(first, calibration=cal, **kwargs)
    report_second = sct.sketch_model(second, calibration=cal, **kwargs)
    exact = kwargs.get("layer") != "sklinear"  # SKLinear draws its fixed sketches from the global generator
    if exact:
        assert_same_factors(factors(from_batches), factors(first))
        assert_same_factors(factors(first), factors(second))
    for report in (report_first, report_second):
        assert report.replaced.keys() == report_batches.replaced.keys()
        assert report.calibration_batches == 3
        assert report.output_error == pytest.approx(report_batches.output_error, rel=1e-9, abs=1e-12) or not exact
        for name, row in report.replaced.items():
            assert row.rank == report_batches.replaced[name].rank
            assert row.output_error == pytest.approx(report_batches.replaced[name].output_error, rel=1e-9, abs=1e-12)
    # the original model is untouched, and the model error was measured against its outputs
    assert all(isinstance(m, nn.Linear) for name, m in model.named_modules() if name.endswith(".q"))
    with torch.no_grad():
        new = torch.cat([first(x).reshape(-1) for x in data])
        old = torch.cat([model(x).reshape(-1) for x in data])
    assert report_first.output_error == pytest.approx(float(torch.linalg.norm(new - old) / torch.linalg.norm(old)),
                                                      rel=1e-9)


def test_measuring_with_a_calibration_runs_each_batch_once(gen):
    model, data = model_and_batches(gen)
    cal = sct.Calibration(model, data)
    target = copy.deepcopy(model)
    calls = []
    target.register_forward_pre_hook(lambda module, args: calls.append(1))
    sct.sketch_model(target, low_rank=3, calibration=cal)
    assert len(calls) == 3  # the measurement pass only: no calibration pass, no second pass of the original
    calls.clear()
    target = copy.deepcopy(model)
    target.register_forward_pre_hook(lambda module, args: calls.append(1))
    sct.sketch_model(target, low_rank=3, calibration=data)
    assert len(calls) == 6  # calibration and measurement


def test_layers_a_calibration_lacks_are_never_called(gen):
    model, data = model_and_batches(gen, blocks=1)
    cal = sct.Calibration(model, data)
    bigger = nn.Sequential(copy.deepcopy(model[0]), Attention())
    report = sct.sketch_model(bigger, low_rank=3, calibration=cal)
    assert {row.name for row in report.kept} == {f"1.{n}" for n in ("q", "k", "v", "o", "gate", "up", "down")}
    assert all("never called" in row.reason for row in report.kept)
    assert set(report.replaced) == {f"0.{n}" for n in ("q", "k", "v", "o", "gate", "up", "down")}


def test_errors(gen):
    model, data = model_and_batches(gen, blocks=1)
    with pytest.raises(TypeError, match="Calibration: model: expected a torch.nn.Module, got dict"):
        sct.Calibration({}, data)
    with pytest.raises(TypeError, match=r"Calibration: data: expected an iterable of model inputs.*got Tensor"):
        sct.Calibration(model, data[0])
    with pytest.raises(ValueError, match="Calibration: data: expected at least one batch"):
        sct.Calibration(model, [])
    with pytest.raises(TypeError, match="expected each batch to be a tensor"):
        sct.Calibration(model, [3.0])
    cal = sct.Calibration(model, data)
    other = nn.Sequential(nn.Linear(12, 12, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"Calibration was built on another model: none of the layers to convert "
                                         r"\(0, \.\.\.\) is among its 7 layers \(0\.down, 0\.gate, 0\.k"):
        sct.sketch_model(other, low_rank=2, calibration=cal)
    renamed = nn.Sequential(Attention(d=12, ffn=24))
    with pytest.raises(ValueError, match="layer '0.down' takes inputs of width 24, but the Calibration saw width 20"):
        sct.sketch_model(renamed, low_rank=2, calibration=cal)
    with pytest.raises(TypeError, match="calibration: expected an iterable of model inputs"):
        sct.sketch_model(model, low_rank=2, calibration=5)


def test_float32_grams_are_products_in_float32_summed_in_float64(gen):
    """float32 activations: each call's XᵀX is a float32 GEMM, the sum over calls float64; the
    chosen factors' output error (measured against the exact float64 Gram matrix) is within
    1e-6 (relative) of the factors from float64 products."""
    model, data = model_and_batches(gen, dtype=torch.float32, batches=4)
    cal = sct.Calibration(model, data)
    gram = cal.grams["0.q"]
    assert gram.dtype == torch.float64
    X = torch.cat([x.reshape(-1, 12) for x in data]).to(torch.float64)
    exact = X.t() @ X
    torch.testing.assert_close(gram, exact, rtol=1e-5, atol=1e-5 * float(exact.abs().max()))
    M = model[0].q.weight.detach().t().to(torch.float64)
    for rank in (2, 4, 8):
        errors = []
        for G in (gram, exact):
            _, Vt = _whitened.whitened_svd(M, G)
            A, B = _whitened.lowrank_factors(M, Vt, rank)
            errors.append(_whitened.output_error(A @ B, M, exact))
        assert errors[0] <= errors[1] * (1 + 1e-6) + 1e-12


def test_singular_grams_fall_back_to_the_eigendecomposition(gen):
    """Rank-deficient activations (Cholesky fails): the factor still whitens exactly, L Lᵀ = G."""
    X = torch.randn(5, 8, generator=gen, dtype=torch.float64)  # 5 rows: rank 5 of 8
    G = X.t() @ X
    Lt = _whitened.factorise(G)
    torch.testing.assert_close(Lt.t() @ Lt, G)
    M = torch.randn(8, 6, generator=gen, dtype=torch.float64)
    s, _ = _whitened.whitened_svd(M, G)
    expected = torch.cat([torch.linalg.svdvals(X @ M), torch.zeros(1, dtype=s.dtype)])
    # the null space's singular values are rounding: √ε‖G‖ at most, as with the eigendecomposition
    torch.testing.assert_close(s, expected, atol=1e-6 * float(expected[0]), rtol=1e-8)


def test_the_factor_cache_sees_in_place_changes(gen):
    X = torch.randn(30, 6, generator=gen, dtype=torch.float64)
    G = X.t() @ X
    first = _whitened.whitening(G)
    assert _whitened.whitening(G) is first
    G.mul_(4)
    torch.testing.assert_close(_whitened.whitening(G), 2 * first)


def test_lapack_threads_are_restored():
    threads = torch.get_num_threads()
    with _whitened.lapack_threads(64):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == threads
    with _whitened.lapack_threads(_whitened.SERIAL_LAPACK + 1):
        assert torch.get_num_threads() == threads


def test_gram_hooks_keep_sums_apart_once_inputs_differ(gen):
    """Two layers fed the same input in the first call and different inputs later get separate
    sums (sharing is by the whole history of inputs, not by the first call)."""
    a, b = nn.Linear(4, 4, dtype=torch.float64), nn.Linear(4, 4, dtype=torch.float64)
    x, y = (torch.randn(3, 4, generator=gen, dtype=torch.float64) for _ in range(2))
    rows = _calibrate.rows_for(4)
    with _calibrate.gram_hooks({"a": (a, rows), "b": (b, rows)}) as grams:
        a(x), b(x)
        assert grams["a"] is grams["b"]
        a(y), b(x)
    assert grams["a"] is not grams["b"]
    torch.testing.assert_close(grams["a"], x.t() @ x + y.t() @ y)
    torch.testing.assert_close(grams["b"], 2 * x.t() @ x)


class MaskedEncoder(nn.Module):
    """A keyword-argument model in the transformers convention: ids and an attention mask."""

    def __init__(self, vocab=30, d=8, out=6):
        super().__init__()
        self.embed = nn.Embedding(vocab, d, dtype=torch.float64)
        self.proj = nn.Linear(d, out, dtype=torch.float64)

    def forward(self, input_ids, attention_mask):
        return self.proj(self.embed(input_ids))


@pytest.mark.parametrize("float_mask", [False, True])
def test_padding_positions_stay_out_of_the_grams(gen, float_mask):
    model = MaskedEncoder()
    ids = torch.randint(1, 30, (3, 7), generator=gen)
    lengths = [7, 4, 2]
    mask = torch.zeros(3, 7, dtype=torch.float32 if float_mask else torch.int64)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    grams = _calibrate.collect_grams(model, {"proj": (model.proj, 8)}, [{"input_ids": ids, "attention_mask": mask}])
    with torch.no_grad():
        tokens = torch.cat([model.embed(ids[row, :length]) for row, length in enumerate(lengths)])
        everything = model.embed(ids).reshape(-1, 8)
    torch.testing.assert_close(grams["proj"], tokens.t() @ tokens, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(grams["proj"], everything.t() @ everything)  # the padded rows would have counted


def test_masks_that_are_not_zero_one_or_not_2d_keep_every_row(gen):
    model = MaskedEncoder()
    ids = torch.randint(1, 30, (2, 5), generator=gen)
    with torch.no_grad():
        rows = model.embed(ids).reshape(-1, 8)
    for mask in (torch.full((2, 5), 0.5), torch.ones(2, 1, 1, 5), torch.ones(2, 5)):
        grams = _calibrate.collect_grams(model, {"proj": (model.proj, 8)}, [{"input_ids": ids, "attention_mask": mask}])
        torch.testing.assert_close(grams["proj"], rows.t() @ rows, rtol=1e-12, atol=1e-12)
    assert _calibrate.token_positions([ids]) is None and _calibrate._TOKEN_POSITIONS.get() is None
