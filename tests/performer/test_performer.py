"""RandMultiHeadAttention / make_performer: Panther's FAVOR+ formulas transcribed in float64 as
the non-causal reference, a quadratic float64 reference for causal mode, exact causality (later
tokens change no earlier output, bit for bit), error against exact softmax attention falling
with the number of features, reproducible features, dropout (unbiased, off in eval), gradcheck,
torch.compile, state_dict, and every refusal."""
import math
import statistics

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from sketchcore.torch import RandMultiHeadAttention, make_performer  # noqa: E402
from sketchcore.torch.layers._attention import orthogonal_features  # noqa: E402


def relative_error(a, b):
    return torch.linalg.norm((a - b).double()).item() / max(torch.linalg.norm(b.double()).item(), 1e-300)


def panther_features(x, W, kernel_fn, is_query):
    """Panther's softmax_kernel_transform / relu_kernel_transform on (B, L, H, d)."""
    m, d = W.shape
    if kernel_fn == "relu":
        return torch.relu(x @ W.t() / math.sqrt(m)) + 1e-5
    x = x * d ** -0.25
    dash = x @ W.t()
    diag = (x ** 2).sum(-1, keepdim=True) / 2
    top = dash.amax(-1, keepdim=True)
    if not is_query:
        top = top.amax(-3, keepdim=True)  # over the sequence too
    return (torch.exp(dash - diag - top) + 1e-5) / math.sqrt(m)


def reference(layer, query, key, value):
    """Panther's rmha_forward (non-causal), or for causal mode the quadratic masked form with
    sketchcore's causal key features, all in float64."""
    B, L, E = query.shape
    H = layer.num_heads
    d = E // H
    W = layer.projection_matrix.double()

    def heads(x, w, b):
        return nn.functional.linear(x.double(), w.double(), None if b is None else b.double()).view(B, x.shape[1], H, d)
    q, k, v = heads(query, layer.Wq, layer.bq), heads(key, layer.Wk, layer.bk), heads(value, layer.Wv, layer.bv)
    phi_q = panther_features(q, W, layer.kernel_fn, True)
    if layer.causal and layer.kernel_fn == "softmax":
        ks = k * d ** -0.25
        phi_k = torch.exp(ks @ W.t() - (ks ** 2).sum(-1, keepdim=True) / 2 - (W ** 2).sum(-1).max() / 2) / math.sqrt(
            W.shape[0])
    else:
        phi_k = panther_features(k, W, layer.kernel_fn, False)
    scores = torch.einsum("blhm,bshm->bhls", phi_q, phi_k)
    if layer.causal:
        scores = scores * torch.ones(L, L, dtype=torch.float64).tril()
    out = torch.einsum("bhls,bshd->blhd", scores, v) / scores.sum(-1).transpose(1, 2).unsqueeze(-1)
    return nn.functional.linear(out.reshape(B, L, E), layer.W0.double(),
                                None if layer.b0 is None else layer.b0.double())


def layer_and_inputs(kernel_fn, causal, length=300, bias=True, seed=0):
    torch.manual_seed(seed)
    layer = RandMultiHeadAttention(32, 4, 24, kernel_fn=kernel_fn, iscausal=causal, bias=bias,
                                   dtype=torch.float64, seed=seed)
    with torch.no_grad():
        for b in (layer.bq, layer.bk, layer.bv, layer.b0):
            if b is not None:
                b.normal_()
    x = torch.randn(2, length, 32, dtype=torch.float64)
    return layer, x


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kernel_fn", ["softmax", "relu"])
@pytest.mark.parametrize("length", [1, 127, 300])
def test_matches_the_float64_reference(kernel_fn, causal, length):
    layer, x = layer_and_inputs(kernel_fn, causal, length)
    y, none = layer(x, x, x)
    assert none is None and y.shape == x.shape
    assert relative_error(y, reference(layer, x, x, x)) <= 1e-12


def test_cross_attention_with_other_lengths_and_no_bias():
    layer, x = layer_and_inputs("softmax", False, 50, bias=False)
    memory = torch.randn(2, 77, 32, dtype=torch.float64)
    y, _ = layer(x, memory, memory)
    assert relative_error(y, reference(layer, x, memory, memory)) <= 1e-12


@pytest.mark.parametrize("kernel_fn", ["softmax", "relu"])
@pytest.mark.parametrize("t", [0, 127, 128, 200])
def test_causal_outputs_never_see_later_tokens(kernel_fn, t):
    layer, x = layer_and_inputs(kernel_fn, True, 300, seed=1)
    later = x.clone()
    later[:, t + 1:] = 100 * torch.randn_like(later[:, t + 1:])  # wildly different later tokens
    y, y_later = layer(x, x, x)[0], layer(later, later, later)[0]
    assert torch.equal(y[:, :t + 1], y_later[:, :t + 1])
    assert not torch.equal(y[:, t + 1:], y_later[:, t + 1:])


@pytest.mark.parametrize("causal", [False, True])
def test_error_against_exact_softmax_attention_falls_with_the_number_of_features(causal):
    torch.manual_seed(2)
    mha = nn.MultiheadAttention(64, 4, batch_first=True, dtype=torch.float64)
    x = torch.randn(2, 256, 64, dtype=torch.float64)
    mask = nn.Transformer.generate_square_subsequent_mask(256, dtype=torch.float64) if causal else None
    exact = mha(x, x, x, attn_mask=mask, need_weights=False)[0]
    medians = []
    for features in (16, 128, 1024):
        errors = [relative_error(make_performer(mha, features, "softmax", causal, seed=s)(x, x, x)[0], exact)
                  for s in range(5)]
        medians.append(statistics.median(errors))
    assert medians[0] > medians[1] > medians[2] and medians[2] < 0.6 * medians[0]


def test_features_are_orthogonal_blocks_from_the_seed_alone():
    W = orthogonal_features(40, 16, seed=5, dtype=torch.float64)
    for block in (W[:16], W[16:32], W[32:]):
        gram = block @ block.t()
        assert torch.allclose(gram - torch.diag(gram.diag()), torch.zeros_like(gram), atol=1e-12)
    torch.manual_seed(1)
    a = RandMultiHeadAttention(32, 2, 40, seed=5, dtype=torch.float64)
    after_seed_1 = torch.random.get_rng_state()
    torch.manual_seed(2)
    b = RandMultiHeadAttention(32, 2, 40, seed=5, dtype=torch.float64)
    # Panther reseeds torch's global RNG while building the features, so its state after
    # construction is the same whatever came before; here the caller's stream goes on.
    assert not torch.equal(torch.random.get_rng_state(), after_seed_1)
    assert torch.equal(a.projection_matrix, W) and torch.equal(b.projection_matrix, W)
    assert not torch.equal(RandMultiHeadAttention(32, 2, 40, seed=6).projection_matrix.double(), W)


def test_dropout_drops_keys_without_bias_and_only_in_training():
    layer, x = layer_and_inputs("softmax", False, 40)
    exact = layer(x, x, x)[0]
    layer.dropout = 0.3
    layer.eval()
    assert torch.equal(layer(x, x, x)[0], exact)
    layer.train()
    torch.manual_seed(3)
    draws = torch.stack([layer(x, x, x)[0] for _ in range(400)])
    assert relative_error(draws[0], exact) > 0.05  # dropout acts
    assert relative_error(draws.mean(0), exact) < 0.25 * relative_error(draws[0], exact)  # and averages out


def test_gradcheck_and_compile():
    torch.manual_seed(4)
    layer = RandMultiHeadAttention(8, 2, 6, iscausal=True, dtype=torch.float64)
    x = torch.randn(1, 9, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: layer(t, t, t)[0], (x,))
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    assert relative_error(compiled(x, x, x)[0], layer(x, x, x)[0]) <= 1e-12


def test_make_performer_copies_the_weights_and_state_dict_round_trips():
    torch.manual_seed(5)
    mha = nn.MultiheadAttention(32, 4, dropout=0.1)
    performer = make_performer(mha, 16, "relu", True, seed=3)
    assert performer.dropout == 0.1 and performer.kernel_fn == "relu" and performer.causal
    assert torch.equal(performer.Wk, mha.in_proj_weight[32:64]) and torch.equal(performer.b0, mha.out_proj.bias)
    with torch.no_grad():
        mha.in_proj_weight.zero_()
    assert performer.Wk.abs().sum() > 0  # copied, not shared
    with pytest.raises(RuntimeError, match=r"kernel_fn='relu' \(this layer: 'softmax'\), iscausal=True \(this "
                                           r"layer: False\), dropout=0.1 \(this layer: 0.0\), seed=3"):
        RandMultiHeadAttention(32, 4, 16).load_state_dict(performer.state_dict())  # never a silent change
    other = RandMultiHeadAttention(32, 4, 16, 0.1, kernel_fn="relu", iscausal=True, seed=3)
    other.batch_first = False
    other.load_state_dict(performer.state_dict())
    x = torch.randn(10, 2, 32)
    performer.eval(), other.eval()
    assert torch.equal(other(x, x, x)[0], performer(x, x, x)[0])
    with pytest.raises(RuntimeError, match="num_random_features=16 \\(this layer: 17\\)"):
        RandMultiHeadAttention(32, 4, 17).load_state_dict(performer.state_dict())


def test_refusals_name_the_argument():
    with pytest.raises(ValueError, match="embed_dim: expected a multiple of num_heads = 3, got 32"):
        RandMultiHeadAttention(32, 3, 8)
    with pytest.raises(ValueError, match="dropout: expected a probability in \\[0, 1\\), got 1.0"):
        RandMultiHeadAttention(32, 4, 8, dropout=1.0)
    with pytest.raises(ValueError, match="kernel_fn: expected 'softmax' or 'relu', got 'exp'"):
        RandMultiHeadAttention(32, 4, 8, kernel_fn="exp")
    with pytest.raises(ValueError, match="num_random_features: expected an integer ≥ 1"):
        RandMultiHeadAttention(32, 4, 0)
    with pytest.raises(ValueError, match="seed: expected an integer ≥ 0"):
        RandMultiHeadAttention(32, 4, 8, seed=-1)
    layer = RandMultiHeadAttention(32, 4, 8, iscausal=True)
    x = torch.randn(2, 5, 32)
    with pytest.raises(ValueError, match="attention_mask: not supported"):
        layer(x, x, x, attention_mask=torch.ones(2, 5, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="query: expected a \\(B, L, 32\\) tensor, got shape \\(5, 32\\)"):
        layer(x[0], x, x)
    with pytest.raises(ValueError, match="causal attention needs as many keys as queries"):
        layer(x, x[:, :3], x[:, :3])
    with pytest.raises(ValueError, match="key, value: expected the same"):
        layer(x, x, x[:, :4])
    with pytest.raises(TypeError, match="expected a torch.nn.MultiheadAttention, got Linear"):
        make_performer(nn.Linear(4, 4), 8)
    with pytest.raises(ValueError, match="kdim == vdim == embed_dim"):
        make_performer(nn.MultiheadAttention(32, 4, kdim=16, vdim=16), 8)


def test_multihead_attention_keywords_layout_and_key_padding():
    torch.manual_seed(6)
    mha = nn.MultiheadAttention(32, 4, dtype=torch.float64)  # batch_first=False: (L, B, E)
    seq_first = make_performer(mha, 24, "relu")
    batch_first = make_performer(mha, 24, "relu")
    batch_first.batch_first = True
    x = torch.randn(2, 40, 32, dtype=torch.float64)
    y, weights = seq_first(x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1), need_weights=True)
    assert weights is None and torch.equal(y.transpose(0, 1), batch_first(x, x, x)[0])
    padding = torch.zeros(2, 40, dtype=torch.bool)
    padding[0, 25:] = True
    padding[1, :3] = True
    masked = batch_first(x, x, x, key_padding_mask=padding)[0]
    as_float = torch.zeros(2, 40, dtype=torch.float64).masked_fill(padding, float("-inf"))
    assert torch.equal(batch_first(x, x, x, key_padding_mask=as_float)[0], masked)
    for b, keys in ((0, slice(0, 25)), (1, slice(3, 40))):  # the same as attending to the kept keys only
        alone = batch_first(x[b:b + 1], x[b:b + 1, keys], x[b:b + 1, keys])[0]
        assert relative_error(masked[b:b + 1], alone) <= 1e-12


def test_a_causal_mask_or_is_causal_makes_the_call_causal_and_other_masks_are_refused():
    layer, x = layer_and_inputs("softmax", False, 50)
    causal_layer = RandMultiHeadAttention(32, 4, 24, iscausal=True, dtype=torch.float64)
    causal_layer.load_state_dict(dict(layer.state_dict()))  # the tensors only: a plain dict carries no configuration
    expected = causal_layer(x, x, x)[0]
    bool_mask = torch.ones(50, 50, dtype=torch.bool).triu(1)
    float_mask = nn.Transformer.generate_square_subsequent_mask(50, dtype=torch.float64)
    assert torch.equal(layer(x, x, x, attn_mask=bool_mask)[0], expected)
    assert torch.equal(layer(x, x, x, attn_mask=float_mask)[0], expected)
    assert torch.equal(layer(x, x, x, is_causal=True)[0], expected)
    assert not torch.equal(layer(x, x, x)[0], expected)
    with pytest.raises(ValueError, match="attn_mask: expected None or the causal \\(50, 50\\) mask"):
        layer(x, x, x, attn_mask=torch.zeros(50, 50, dtype=torch.bool))
    with pytest.raises(ValueError, match="key_padding_mask: expected shape \\(2, 50\\)"):
        layer(x, x, x, key_padding_mask=torch.zeros(2, 49, dtype=torch.bool))
    with pytest.raises(ValueError, match="key_padding_mask: expected a bool mask or a float one of 0 and −inf"):
        layer(x, x, x, key_padding_mask=torch.full((2, 50), -1.0, dtype=torch.float64))


def _encoder(seed):
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, dropout=0.0, batch_first=True,
                                       dtype=torch.float64)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=True)


def test_sketch_model_turns_a_transformer_encoders_attention_into_performers():
    from sketchcore.torch import restore_model, sketch_model
    x = torch.randn(3, 64, 64, dtype=torch.float64)
    padding = torch.zeros(3, 64, dtype=torch.bool)
    padding[1, 50:] = True
    causal = nn.Transformer.generate_square_subsequent_mask(64, dtype=torch.float64)
    exact = _encoder(7).eval()
    errors = {}
    for features in (16, 1024):
        model = _encoder(7).eval()
        report = sketch_model(model, attention=features)  # attention only: the feed-forward layers stay
        assert sorted(report) == ["layers.0.self_attn", "layers.1.self_attn"] and not report.skipped
        assert report["layers.0.self_attn"].kind == "RandMultiHeadAttention"
        assert report["layers.0.self_attn"].params_after == report["layers.0.self_attn"].params_before
        assert all(type(layer.self_attn) is RandMultiHeadAttention and type(layer.linear1) is nn.Linear
                   for layer in model.layers)
        with torch.no_grad():  # eval with a padding mask: the encoder's fused path would bypass the Performer
            y = model(x, src_key_padding_mask=padding)
            errors[features] = relative_error(y, exact(x, src_key_padding_mask=padding))
            later = x.clone()
            later[:, 40:] = 10 * torch.randn_like(later[:, 40:])
            assert torch.equal(model(x, mask=causal, is_causal=True)[:, :40],
                               model(later, mask=causal, is_causal=True)[:, :40])
        restored = restore_model(_encoder(8).eval(), model.state_dict())
        with torch.no_grad():
            assert torch.equal(restored(x, src_key_padding_mask=padding), y)
    assert 0 < errors[1024] < errors[16]
    with pytest.raises(ValueError, match="attention: expected a number of random features ≥ 1"):
        sketch_model(_encoder(7), low_rank=2, layer="lowrank", attention=0)
