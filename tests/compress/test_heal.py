"""sketchcore.torch.heal: distillation of a converted model's factors against the original lowers
the loss and the output error on fresh held-out data (a plain MLP, a BERT encoder with
attention masks, a LLaMA decoder with loss="logits"); the teacher and the frozen parameters stay
bit-identical; requires_grad, .grad and training flags are restored; every error path names its
argument."""
import copy
import doctest

import pytest

torch = pytest.importorskip("torch")
sct = pytest.importorskip("sketchcore.torch")
nn = torch.nn
from sketchcore.torch.compress import _heal  # noqa: E402


def snapshot(module):
    return {name: p.detach().clone() for name, p in module.state_dict().items()}


def assert_same(before, module):
    after = module.state_dict()
    assert before.keys() == after.keys()
    for name, value in before.items():
        assert torch.equal(value, after[name]), name


def mlp_pair(seed=0):
    torch.manual_seed(seed)
    dense = nn.Sequential(nn.Linear(24, 48), nn.GELU(), nn.Dropout(0.5), nn.Linear(48, 24), nn.LayerNorm(24),
                          nn.Linear(24, 8))
    teacher = copy.deepcopy(dense).eval()
    sct.sketch_model(dense, param_ratio=0.4, exclude=["5"])
    return dense, teacher


def relative_error(model, teacher, inputs):
    with torch.no_grad():
        num = sum(float((model(x) - teacher(x)).pow(2).sum()) for x in inputs)
        den = sum(float(teacher(x).pow(2).sum()) for x in inputs)
    return (num / den) ** 0.5


def test_heal_lowers_the_loss_and_keeps_the_teacher_and_frozen_parameters():
    model, teacher = mlp_pair()
    data = [torch.randn(64, 24) for _ in range(4)]
    fresh = [torch.randn(128, 24) for _ in range(2)]
    model.train()
    model[1].training = False  # a mixed set of flags, restored as it was
    model[4].weight.requires_grad_(False)  # a frozen flag the caller set, restored
    flags = {name: m.training for name, m in model.named_modules()}
    grads = {name: p.requires_grad for name, p in model.named_parameters()}
    teacher_before, frozen_before = snapshot(teacher), {n: p.detach().clone() for n, p in model.named_parameters()
                                                        if n.startswith(("4.", "5."))}
    error_before = relative_error(model, teacher, fresh)
    report = sct.heal(model, teacher, data, steps=40, lr=1e-2, progress=False, validation=fresh)

    assert report.validation_after < 0.85 * report.validation_before
    assert relative_error(model, teacher, fresh) < 0.9 * error_before
    assert len(report.losses) == report.steps == 40 and report.seconds > 0 and report.lr == 1e-2
    assert report.trained == sum(p.numel() for n, p in model.named_parameters() if n.startswith(("0.", "3.")))
    assert_same(teacher_before, teacher)
    for name, value in frozen_before.items():
        assert torch.equal(value, model.get_parameter(name)), name
    assert {name: m.training for name, m in model.named_modules()} == flags
    assert {name: p.requires_grad for name, p in model.named_parameters()} == grads
    assert all(p.grad is None for p in model.parameters()) and all(p.grad is None for p in teacher.parameters())
    assert not teacher.training and all(p.requires_grad for p in teacher.parameters())
    text = str(report)
    assert "40 steps" in text and "validation hidden loss" in text and "->" in text


def test_params_all_loss_output_batch_size_and_the_progress_bar(capsys):
    model, teacher = mlp_pair(1)
    frozen = model[4].weight.detach().clone()
    data = [torch.randn(96, 24)]
    report = sct.heal(model, teacher, data, steps=6, lr=1e-2, params="all", loss="output", batch_size=32,
                      warmup=0.0, validation=data)
    assert not torch.equal(frozen, model[4].weight)  # trained too
    assert report.trained == sum(p.numel() for p in model.parameters())
    assert report.validation_after < report.validation_before and report.validation_before is not None
    assert "heal [" in capsys.readouterr().err
    assert _heal._split({"x": torch.zeros(5, 2), "n": 3, "t": torch.zeros(2)}, 2)[2]["x"].shape == (1, 2)
    assert [len(p) for p in _heal._split(torch.zeros(5, 2), 2)] == [2, 2, 1]


def test_hidden_loss_is_masked_and_scale_free():
    t = torch.randn(2, 5, 8)
    s = t.clone()
    s[1, 3:] += 100.0  # only padded positions differ
    mask = torch.ones(2, 5)
    mask[1, 3:] = 0
    assert float(_heal._hidden_loss([s], [t], mask)) == 0.0
    s = t + 0.1 * torch.randn(2, 5, 8)
    assert float(_heal._hidden_loss([s * 7], [t * 7], None)) == pytest.approx(float(_heal._hidden_loss([s], [t], None)),
                                                                          rel=1e-5)


def small_bert(transformers):
    config = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=32, initializer_range=0.2)
    return transformers.BertModel(config)


def bert_batch(gen, n=8, length=12):
    mask = (torch.arange(length) < torch.randint(length // 2, length + 1, (n, 1), generator=gen)).long()
    return {"input_ids": torch.randint(1, 64, (n, length), generator=gen), "attention_mask": mask}


def test_heal_an_encoder_on_masked_batches():
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    teacher = small_bert(transformers).eval()
    model = copy.deepcopy(teacher)
    sct.sketch_model(model, param_ratio=0.5, include=["encoder.*"], calibration=[bert_batch(gen) for _ in range(2)])
    model.train()
    data, fresh = [bert_batch(gen) for _ in range(4)], [bert_batch(gen) for _ in range(2)]
    embeddings = model.embeddings.word_embeddings.weight.detach().clone()
    teacher_before = snapshot(teacher)

    def error():
        num = den = 0.0
        with torch.no_grad():
            for b in fresh:
                keep = b["attention_mask"].bool()
                s, t = model(**b).last_hidden_state[keep], teacher(**b).last_hidden_state[keep]
                num, den = num + float((s - t).pow(2).sum()), den + float(t.pow(2).sum())
        return (num / den) ** 0.5

    before = error()
    report = sct.heal(model, teacher, data, steps=40, lr=1e-2, progress=False, validation=fresh)
    assert report.validation_after < 0.85 * report.validation_before
    assert error() < 0.95 * before
    assert torch.equal(embeddings, model.embeddings.word_embeddings.weight)
    assert_same(teacher_before, teacher)
    assert model.training and all(m.training for m in model.modules())


def test_heal_a_causal_lm_by_logits():
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                      initializer_range=0.2)
    teacher = transformers.LlamaForCausalLM(config).eval()
    model = copy.deepcopy(teacher)
    batch = lambda: {"input_ids": torch.randint(0, 64, (8, 12), generator=gen)}  # noqa: E731
    sct.sketch_model(model, param_ratio=0.5, include=["model.layers.*"], calibration=[batch()])
    teacher_before = snapshot(teacher)
    report = sct.heal(model, teacher, [batch() for _ in range(4)], steps=40, lr=1e-2, loss="logits", progress=False,
                      validation=[batch() for _ in range(2)])
    assert report.validation_after < 0.85 * report.validation_before
    assert_same(teacher_before, teacher)


def test_errors_name_the_argument():
    model, teacher = mlp_pair()
    data = [torch.randn(4, 24)]
    cases = [
        (dict(model={"a": 1}), TypeError, "heal: model: expected a torch.nn.Module, got dict"),
        (dict(teacher=None), TypeError, "heal: teacher: expected a torch.nn.Module, got NoneType"),
        (dict(teacher=model), ValueError, "heal: teacher: expected the original model"),
        (dict(data=torch.randn(4, 24)), TypeError, r"heal: data: expected an iterable .* got Tensor \(wrap"),
        (dict(data=[]), ValueError, "heal: data: expected at least one batch of model inputs, got none"),
        (dict(data=[3]), TypeError, "heal: data: expected each batch to be a tensor, .* got int"),
        (dict(validation=[]), ValueError, "heal: validation: expected at least one batch"),
        (dict(steps=0), ValueError, r"heal: steps: expected an integer ≥ 1, got 0"),
        (dict(steps=2.5), ValueError, r"heal: steps: expected an integer ≥ 1, got 2.5"),
        (dict(lr=0), ValueError, r"heal: lr: expected a finite number > 0 or None, got 0"),
        (dict(lr=-1e-3), ValueError, r"heal: lr: expected a finite number > 0 or None, got -0.001"),
        (dict(lr="1e-3"), ValueError, r"heal: lr: expected a finite number > 0 or None, got '1e-3'"),
        (dict(loss="mse"), ValueError, r"heal: loss: expected one of \('hidden', 'logits', 'output'\), got 'mse'"),
        (dict(params="some"), ValueError, r"heal: params: expected one of \('factors', 'all'\), got 'some'"),
        (dict(batch_size=0), ValueError, r"heal: batch_size: expected an integer ≥ 1, got 0"),
        (dict(warmup=1.0), ValueError, r"heal: warmup: expected a fraction of the steps in \[0, 1\), got 1.0"),
    ]
    for change, kind, message in cases:
        arguments = dict(model=model, teacher=teacher, data=data, progress=False) | change
        with pytest.raises(kind, match=message):
            sct.heal(**arguments)
    dense = copy.deepcopy(teacher)
    with pytest.raises(ValueError, match=r"heal: params: expected 'factors' to select at least one parameter of "
                                         r"model, got none \(convert it with sketch_model first\)"):
        sct.heal(dense, teacher, data, progress=False)
    with pytest.raises(ValueError, match="shares no trained parameter"):
        sct.heal(dense, nn.Sequential(dense[0]), data, params="all", progress=False)


def test_docstring_example():
    results = doctest.testmod(_heal, extraglobs={"torch": torch, "nn": nn})
    assert results.attempted > 0 and results.failed == 0
