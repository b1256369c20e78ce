"""int8 factors in whole models (issue 49): ``quantize_`` and ``sketch_model(quantize="int8")``
on a transformers LLaMA (config-built, no download) with hooks counting the int8 layers that
ran, composition with torch's ``quantize_dynamic`` for the dense leftovers, the report, and
``restore_model`` of a quantized state_dict."""
import copy
import io
import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from sketchcore.torch import (Int8LowRankLinear, LowRankLinear, SKLinear, quantize_, restore_model,  # noqa: E402
                              sketch_model)

LINEARS_PER_BLOCK = 7  # q, k, v, o, gate, up, down


def llama(seed):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=176, num_hidden_layers=2, vocab_size=300,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      tie_word_embeddings=False)
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(config).eval()


def int8_calls(model):
    calls = []
    for module in model.modules():
        if isinstance(module, Int8LowRankLinear):
            module.register_forward_hook(lambda m, args, out: calls.append(m))
    return calls


def converted(seed, **options):
    model = llama(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = sketch_model(model, exclude=["lm_head"], param_ratio=0.5, **options)
    return model, report


def test_quantize_replaces_every_low_rank_layer_and_the_int8_layers_run_in_the_llama(rng):
    float_model, _ = converted(int(rng.integers(2 ** 31)))
    model = quantize_(copy.deepcopy(float_model), "int8")
    names = [n for n, m in model.named_modules() if isinstance(m, Int8LowRankLinear)]
    assert len(names) == 2 * LINEARS_PER_BLOCK and not any(isinstance(m, LowRankLinear) for m in model.modules())
    assert type(model.lm_head) is nn.Linear
    calls = int8_calls(model)
    ids = torch.from_numpy(rng.integers(0, 300, (2, 12)))
    with torch.no_grad():
        logits, reference = model(ids).logits, float_model(ids).logits
    assert len(calls) == 2 * LINEARS_PER_BLOCK  # one call per layer per forward
    relative = float((logits - reference).norm() / reference.norm())
    assert 0 < relative < 0.05, relative  # int8 factors: close to the float factors, not identical
    assert (logits.argmax(-1) == reference.argmax(-1)).float().mean() > 0.8


def test_torch_quantize_dynamic_takes_the_dense_lm_head_and_leaves_our_layers_alone(rng):
    model, _ = converted(int(rng.integers(2 ** 31)))
    quantize_(model, "int8")
    ours = {n: m for n, m in model.named_modules() if isinstance(m, Int8LowRankLinear)}
    ids = torch.from_numpy(rng.integers(0, 300, (1, 9)))
    with torch.no_grad():
        before = model(ids).logits
    quantized = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8, inplace=True)
    assert type(quantized.lm_head).__module__.startswith("torch.ao.nn.quantized.dynamic")
    assert {n: m for n, m in quantized.named_modules() if isinstance(m, Int8LowRankLinear)} == ours  # same objects
    calls = int8_calls(quantized)
    with torch.no_grad():
        after = quantized(ids).logits
    assert len(calls) == 2 * LINEARS_PER_BLOCK
    assert 0 < float((after - before).norm() / before.norm()) < 0.05


def test_sketch_model_quantizes_in_one_call_and_reports_it(rng):
    seed = int(rng.integers(2 ** 31))
    model, report = converted(seed, quantize="int8")
    two_steps, _ = converted(seed)
    quantize_(two_steps, "int8")
    assert all(row.quantize == "int8" for row in report.values()) and len(report) == 2 * LINEARS_PER_BLOCK
    assert all(isinstance(model.get_submodule(name), Int8LowRankLinear) for name in report)
    assert "LowRankLinear[int8]" in str(report)
    ids = torch.from_numpy(rng.integers(0, 300, (2, 5)))
    with torch.no_grad():
        assert torch.equal(model(ids).logits, two_steps(ids).logits)
    with pytest.raises(ValueError, match=r"sketch_model: quantize: expected one of \('int8', 'fp8'\), Int8Config\(\.\.\.\) or Fp8Config\(\), got 'int4'"):
        sketch_model(nn.Sequential(nn.Linear(8, 8)), low_rank=2, quantize="int4")


def test_sketch_model_quantizes_only_the_layers_it_converted():
    model = nn.Sequential(LowRankLinear(16, 16, 4), nn.Linear(16, 16))
    report = sketch_model(model, low_rank=4, include=["1"], quantize="int8")
    assert type(model[0]) is LowRankLinear and isinstance(model[1], Int8LowRankLinear) and list(report) == ["1"]
    assert "quantize" not in "".join(f"{r.kind}" for r in report.kept)


def test_an_sklinear_model_quantizes_through_sketch_model(rng):
    torch.manual_seed(int(rng.integers(2 ** 31)))
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 48)).eval()
    reference = copy.deepcopy(model)
    report = sketch_model(reference, num_terms=2, low_rank=4, layer="sklinear")
    sketch_model(model, num_terms=2, low_rank=4, layer="sklinear", quantize="int8")
    assert list(report) == ["0", "2"] and all(isinstance(reference.get_submodule(n), SKLinear) for n in report)
    assert all(isinstance(model[i], Int8LowRankLinear) and model[i].rank == 16 for i in (0, 2))
    x = torch.randn(6, 64)
    with torch.no_grad():
        y, expected = model(x), reference(x)
    assert 0 < float((y - expected).norm() / expected.norm()) < 0.05


def test_restore_model_rebuilds_the_int8_layers_from_a_saved_state_dict(rng):
    seed = int(rng.integers(2 ** 31))
    model, _ = converted(seed, quantize="int8")
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    restored = restore_model(llama(seed + 1), torch.load(buffer, weights_only=True))
    assert [type(m) for m in restored.modules()] == [type(m) for m in model.modules()]
    ids = torch.from_numpy(rng.integers(0, 300, (1, 7)))
    with torch.no_grad():
        assert torch.equal(restored(ids).logits, model(ids).logits)


def test_a_layer_registered_twice_is_quantized_once_and_kept_shared():
    shared = LowRankLinear(8, 8, 2)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    quantize_(model, "int8")
    assert isinstance(model[0], Int8LowRankLinear) and model[0] is model[2]


def test_quantize_refuses_unknown_configs_and_wrong_models():
    model = nn.Sequential(LowRankLinear(8, 8, 2))
    with pytest.raises(ValueError, match=r"quantize_: config: expected one of \('int8', 'fp8'\), Int8Config\(\.\.\.\) or Fp8Config\(\), got 'int4'"):
        quantize_(model, "int4")
    with pytest.raises(TypeError, match="quantize_: model: expected a torch.nn.Module, got dict"):
        quantize_({}, "int8")  # type: ignore[type-var]
    with pytest.raises(TypeError, match="got a LowRankLinear itself .* Int8LowRankLinear.from_float"):
        quantize_(LowRankLinear(8, 8, 2), "int8")
    with pytest.warns(UserWarning, match="nothing was quantized: the model holds no LowRankLinear or SKLinear layer"):
        dense = nn.Sequential(nn.Linear(4, 4))
        assert quantize_(dense) is dense and type(dense[0]) is nn.Linear
    assert type(model[0]) is LowRankLinear  # the refused call changed nothing
