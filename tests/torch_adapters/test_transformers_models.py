"""Hugging Face models built from small random configurations (no download): GPT-2's Conv1D
projections convert in the right orientation and shrink as asked, its tied lm_head is kept and
reported, and it still generates; LLaMA (tied embeddings) and BERT convert with and without
calibration, generate, restore bit for bit from the state_dict, and compile."""
import copy
import io
import warnings

import pytest

torch = pytest.importorskip("torch")
sct = pytest.importorskip("sketchcore.torch")
transformers = pytest.importorskip("transformers")


def quiet(model):
    model.generation_config.pad_token_id = 0  # no "setting pad_token_id" chatter
    return model.eval()


def gpt2():
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=101, n_positions=64,
                                     bos_token_id=0, eos_token_id=0)
    return quiet(transformers.GPT2LMHeadModel(config))


def llama():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      tie_word_embeddings=True, bos_token_id=0, eos_token_id=0)
    return quiet(transformers.LlamaForCausalLM(config))


def bert():
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=97, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=128, max_position_embeddings=64)
    return transformers.BertModel(config).eval()


def count(model):
    return sum(p.numel() for p in model.parameters())


def ids(vocab, shape=(2, 12), seed=1):
    return torch.randint(1, vocab, shape, generator=torch.Generator().manual_seed(seed))


def relative(a, b):
    return float(torch.linalg.norm(a - b) / torch.linalg.norm(b))


def test_gpt2_conv1d_projections_convert_shrink_and_generate():
    dense = gpt2()
    x = ids(101)
    model = copy.deepcopy(dense)
    before = count(model)
    report = sct.sketch_model(model, param_ratio=0.5)
    conv1d = [name for name, m in dense.named_modules() if type(m).__name__ == "Conv1D"]
    assert sorted(report) == sorted(conv1d) and len(conv1d) == 8
    for name in conv1d:
        row, old = report[name], dense.get_submodule(name)
        assert (row.in_features, row.out_features) == tuple(old.weight.shape)  # Conv1D stores (in, out)
        assert row.params_after <= 0.5 * row.params_before + row.out_features  # the factors within the ratio
    assert count(model) == before - (report.params_before - report.params_after)
    (kept,) = report.kept
    assert kept.name == "lm_head" and "tied to transformer.wte.weight" in kept.reason
    assert model.lm_head.weight is model.transformer.wte.weight
    out = model.generate(x[:1, :4], max_new_tokens=6, do_sample=False)
    assert out.shape == (1, 10) and torch.equal(out[:, :4], x[:1, :4])


def test_gpt2_at_full_rank_computes_the_dense_model():
    """Orientation check: at full rank every converted Conv1D is exact, so the logits match."""
    dense = gpt2()
    model = copy.deepcopy(dense)
    sct.sketch_model(model, low_rank=64)  # min(in, out) = 64 for every projection
    x = ids(101)
    with torch.no_grad():
        assert relative(model(x).logits, dense(x).logits) < 1e-5


def test_gpt2_data_aware_conversion_beats_the_weight_svd_on_its_data():
    dense = gpt2()
    calibration = [ids(101, (4, 32), seed) for seed in range(3)]
    errors = {}
    for mode in ("plain", "calibrated"):
        model = copy.deepcopy(dense)
        report = sct.sketch_model(model, param_ratio=0.4, calibration=calibration if mode == "calibrated" else None)
        x = ids(101, (4, 32), seed=9)
        with torch.no_grad():
            errors[mode] = relative(model(x).logits, dense(x).logits)
        if mode == "calibrated":
            assert report.calibrated and report.output_error is not None and "output err" in str(report)
    assert errors["calibrated"] < errors["plain"]


@pytest.mark.parametrize("factory", [llama, bert, gpt2])
def test_models_convert_restore_bit_for_bit_and_compile(factory):
    model = factory()
    vocab = model.config.vocab_size
    x = ids(vocab)
    calibration = [{"input_ids": ids(vocab, (2, 16), seed)} for seed in range(2)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SKLinear's Panther size warning on the small layers
        report = sct.sketch_model(model, 1, param_ratio=0.5, calibration=calibration, include=["*layer*", "*h.*"])
    assert len(report) >= 8 and report.output_error is not None
    assert all(row.kind == "SKLinear" for row in report.values())

    def output(m):
        with torch.no_grad():
            result = m(x)
        return result.logits if hasattr(result, "logits") else result.last_hidden_state

    y = output(model)
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    fresh = factory()  # the dense architecture, its own weights
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sct.restore_model(fresh, torch.load(buffer))
    assert torch.equal(output(fresh), y)
    compiled = torch.compile(fresh, backend="aot_eager")
    assert relative(output(compiled), y) < 1e-6
    if hasattr(model, "generate"):
        assert model.generate(x[:1, :3], max_new_tokens=3, do_sample=False).shape == (1, 6)
