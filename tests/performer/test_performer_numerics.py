"""Performer attention's numerics at every head size, length and precision: against a float64
implementation written here from the documented formulas (the quadratic L × S score matrix: no chunks,
no states, no running constants, nothing shared with the kernels), outputs and gradients; causal
outputs that never see a later token, to the bit; sums over 2²⁴ keys; and clear errors for inputs
the kernels cannot take (sparse, meta, malformed DLPack)."""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

import sketchcore  # noqa: E402
from sketchcore.torch import RandMultiHeadAttention, performer_attention  # noqa: E402

SIXTEEN_BIT = (torch.bfloat16, torch.float16)
# Relative tolerances: float32 outputs 1e-5 and gradients 1e-4; 16-bit against the float64 result of
# the same rounded inputs, within 16-bit rounding.
TOLERANCE = {torch.float64: (1e-10, 1e-9), torch.float32: (1e-5, 1e-4), torch.bfloat16: (2e-2, 2e-2),
             torch.float16: (2e-2, 2e-2)}


def attention64(q, k, v, W, kernel, causal, kw=None, vw=None, dtype=torch.float64):
    """The documented formula in float64 (or `dtype`) by the quadratic form. Causal softmax keys have
    no 1e-5, so any constant common to a query's keys cancels: score_ij uses the running maximum over
    j' ≤ i of the exponents of keys of nonzero weight (detached: the output does not depend on it)."""
    q, k, v, W = (t.to(dtype) for t in (q, k, v, W))
    m, d = W.shape
    if kernel == "relu":
        phi_q = torch.relu(q @ W.T / math.sqrt(m)) + 1e-5
        phi_k = torch.relu(k @ W.T / math.sqrt(m)) + 1e-5
    else:
        def dash_and_exponent(x):
            x = x * d ** -0.25
            dash = x @ W.T
            return dash, dash - (x * x).sum(-1, keepdim=True) / 2
        dash_q, exp_q = dash_and_exponent(q)
        phi_q = (torch.exp(exp_q - dash_q.amax(-1, keepdim=True)) + 1e-5) / math.sqrt(m)
        dash_k, exp_k = dash_and_exponent(k)
        if causal:  # relative to each query's running maximum C_i of the (weighted) keys' exponents r_j
            r = exp_k.amax(-1).detach()
            weighted = r if kw is None else r.masked_fill(kw[:, None, :] == 0, -math.inf)
            running = torch.cummax(weighted, dim=-1).values
            running = torch.where(torch.isinf(running), torch.zeros_like(running), running)  # no key yet
            phi_k = torch.exp(exp_k - r[..., None]) / math.sqrt(m)
            later = torch.ones(r.shape[-1], r.shape[-1], dtype=torch.bool).triu(1)
            relative_size = torch.exp((weighted[..., None, :] - running[..., :, None]).masked_fill(later, -math.inf))
        else:
            phi_k = (torch.exp(exp_k - dash_k.amax(dim=(-1, -2), keepdim=True)) + 1e-5) / math.sqrt(m)
    if kw is not None:
        phi_k = phi_k * kw.to(dtype)[:, None, :, None]
    scores = phi_q @ phi_k.transpose(-1, -2)
    if causal:
        scores = torch.tril(scores) if kernel == "relu" else scores * relative_size
    values = v if vw is None else v * vw.to(dtype)[..., None]
    # A query whose every key has weight 0 (or features that underflow) gets 0, and no gradient.
    normaliser = scores.sum(-1, keepdim=True)
    kept = normaliser >= torch.finfo(dtype).tiny
    return torch.where(kept, (scores @ values) / torch.where(kept, normaliser, torch.ones_like(normaliser)), 0.0)


def problem(B, H, L, S, d, e, m, dtype, seed, weights=False):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, n, w, generator=g, dtype=torch.float64) for n, w in ((L, d), (S, d), (S, e)))
    W = torch.randn(m, d, generator=g, dtype=torch.float64)
    grad = torch.randn(B, H, L, e, generator=g, dtype=torch.float64)
    kw = vw = None
    if weights:
        kw = (torch.rand(B, S, generator=g) > 0.2).to(torch.float64)
        vw = torch.rand(B, H, S, generator=g, dtype=torch.float64) * 2
    rounded = [t.to(dtype) for t in (q, k, v, grad)]
    features = W.to(torch.float32 if dtype in SIXTEEN_BIT else dtype)
    return rounded, features, kw, vw


def relative(a, b, floor=0.0):
    a, b = a.detach().to(torch.float64), b.detach().to(torch.float64)
    return float(torch.linalg.vector_norm(a - b)) / max(float(torch.linalg.vector_norm(b)), floor, 1e-300)


def check_against_float64(B, H, L, S, d, e, m, kernel, causal, dtype, seed, weights=False, gradients=True):
    (q, k, v, grad), W, kw, vw = problem(B, H, L, S, d, e, m, dtype, seed, weights)
    inputs = [t.detach().clone().requires_grad_(gradients) for t in (q, k, v)]
    weights_of = (lambda t: None if t is None else t.to(W.dtype))
    out = performer_attention(*inputs, W, kernel=kernel, causal=causal, key_weights=weights_of(kw),
                              value_weights=weights_of(vw))
    assert out.dtype == dtype and out.shape == (B, H, L, e)
    exact = [t.detach().to(torch.float64).requires_grad_(gradients) for t in (q, k, v)]
    expected = attention64(*exact, W.to(torch.float64), kernel, causal, kw, vw)
    out_tol, grad_tol = TOLERANCE[dtype]
    # A result that cancels (one key: dk = 0; queries with tiny normalisers) is only as accurate as
    # float32 arithmetic on its terms: the formula itself evaluated in float32 shows how accurate that is.
    single = [t.detach().to(torch.float32).requires_grad_(gradients) for t in exact]
    in_float32 = attention64(*single, W.to(torch.float32), kernel, causal, kw, vw, dtype=torch.float32)
    bound = max(out_tol, 10 * relative(in_float32, expected)) if dtype != torch.float64 else out_tol
    assert relative(out, expected) <= bound, f"output: {relative(out, expected):.3g} > {bound:.3g}"
    if not gradients:
        return
    out.backward(grad)
    expected.backward(grad.to(torch.float64))
    in_float32.backward(grad.to(torch.float32))
    floor = 1e-2 * float(torch.linalg.vector_norm(grad.to(torch.float64)))  # a gradient near 0 cancels
    for name, ours, reference, f32 in zip("qkv", inputs, exact, single):
        err = relative(ours.grad, reference.grad, floor)
        bound = max(grad_tol, 10 * relative(f32.grad, reference.grad, floor)) if dtype != torch.float64 else grad_tol
        assert err <= bound, f"d{name}: {err:.3g} > {bound:.3g}"


# m ≥ 8 and S ≥ 2 keep relative accuracy attainable: with one feature and one key, dk is an exact
# cancellation (it is 0) of terms up to 1/φ(k) ~ 1e5 times larger, which no float32 evaluation keeps
# within 1e-4 of the gradient's own size (the torch formula in float32 neither).
@settings(max_examples=40, deadline=None)
@given(d=st.integers(1, 256), L=st.one_of(st.integers(1, 300), st.sampled_from([127, 128, 129, 255, 257, 513])),
       S=st.integers(2, 300), e=st.integers(1, 16), m=st.integers(8, 48), kernel=st.sampled_from(["softmax", "relu"]),
       causal=st.booleans(), dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16, torch.float16]),
       weights=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_any_head_size_length_and_dtype_matches_float64(d, L, S, e, m, kernel, causal, dtype, weights, seed):
    check_against_float64(1, 2, L, L if causal else S, d, e, m, kernel, causal, dtype, seed, weights)


@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("kernel", ["softmax", "relu"])
def test_the_layer_in_float32_equals_float64_at_llm_head_sizes(head_dim, causal, kernel):
    torch.manual_seed(head_dim)
    layer = RandMultiHeadAttention(2 * head_dim, 2, 128, kernel_fn=kernel, iscausal=causal).eval()
    x = torch.randn(2, 300, 2 * head_dim, dtype=torch.float64)
    with torch.no_grad():
        expected = layer.double()(x, x, x)[0]
        out = layer.float()(x.float(), x.float(), x.float())[0]
    assert float(torch.linalg.vector_norm(expected)) > 1  # not the silent zero
    assert relative(out, expected) <= 1e-5


@pytest.mark.parametrize("L", [1, 127, 129, 1000, 4095, 4096])
def test_long_causal_sequences_at_head_dim_128(L):
    check_against_float64(1, 1, L, L, 128, 8, 32, "softmax", True, torch.float32, L, gradients=L <= 1000)


@pytest.mark.parametrize("dtype", SIXTEEN_BIT)
@pytest.mark.parametrize("causal", [True, False])
def test_16_bit_gradients_are_within_16_bit_rounding_of_float64(dtype, causal):
    # Rounding the float64 gradient to 16 bits is ~2e-3 (bfloat16); reading the rounded forward output
    # in the backward made dq, dk 2e-2 to 2e-1 off at head dim 256.
    check_against_float64(1, 2, 300, 300, 256, 64, 128, "softmax", causal, dtype, 7)


def wild_keys(L, d, seed):
    """Keys whose exponents differ by hundreds between tokens (norms over 3 orders of magnitude),
    the first one far below the rest: every causal span boundary rule runs."""
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(1, 2, L, d, generator=g, dtype=torch.float64)
    k = k * torch.exp(1.5 * torch.randn(1, 2, L, 1, generator=g, dtype=torch.float64))
    k[..., 0, :] *= 50
    return k


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_causal_keys_of_wildly_different_sizes(dtype):
    L, d = 400, 64
    g = torch.Generator().manual_seed(3)
    q, v = torch.randn(1, 2, L, d, generator=g, dtype=torch.float64), torch.randn(1, 2, L, 16, generator=g,
                                                                                   dtype=torch.float64)
    k, W, grad = wild_keys(L, d, 4), torch.randn(32, d, generator=g, dtype=torch.float64), torch.randn(1, 2, L, 16)
    inputs = [t.to(dtype).requires_grad_() for t in (q, k, v)]
    out = performer_attention(*inputs, W.to(dtype), causal=True)
    exact = [t.detach().to(torch.float64).requires_grad_() for t in inputs]
    expected = attention64(*exact, W, "softmax", True)
    tol = TOLERANCE[dtype]
    assert relative(out, expected) <= tol[0]
    out.backward(grad.to(dtype))
    expected.backward(grad.to(torch.float64))
    for ours, reference in zip(inputs, exact):
        assert relative(ours.grad, reference.grad, 1e-2 * float(torch.linalg.vector_norm(grad))) <= tol[1]


def test_a_padded_prefix_of_huge_keys_sets_no_constant():
    # Keys of weight 0 with exponents far above the rest must not become the constant: they would
    # underflow every real key (and exp of them may overflow: they are multiplied by 0, not used).
    L, d = 300, 64
    g = torch.Generator().manual_seed(5)
    q, v = torch.randn(2, 2, L, d, generator=g), torch.randn(2, 2, L, 8, generator=g)
    k = torch.randn(2, 2, L, d, generator=g)
    k[..., :140, :] *= 0.01  # r_j ≈ max_f dash ≈ 0, the real keys' r_j ≈ −6 ... and the prefix below them:
    W = torch.randn(32, d, generator=g) * 4
    kw = torch.ones(2, L)
    kw[0, :140] = 0
    kw[1, :3] = 0
    inputs = [t.clone().requires_grad_() for t in (q, k, v)]
    out = performer_attention(*inputs, W, causal=True, key_weights=kw)
    exact = [t.detach().double().requires_grad_() for t in (q, k, v)]
    expected = attention64(*exact, W.double(), "softmax", True, kw.double())
    assert torch.isfinite(out).all()
    assert torch.equal(out[0, :, :140], torch.zeros_like(out[0, :, :140]))  # no key yet: 0
    assert relative(out, expected) <= 1e-5
    grad = torch.randn_like(out)
    out.backward(grad)
    expected.backward(grad.double())
    for ours, reference in zip(inputs, exact):
        assert torch.isfinite(ours.grad).all()
        assert relative(ours.grad, reference.grad, 1e-2 * float(torch.linalg.vector_norm(grad))) <= 1e-4


@pytest.mark.parametrize("t", [0, 50, 127, 128, 200])
def test_causal_outputs_never_see_later_tokens_to_the_bit_at_head_dim_128(t):
    L, d = 300, 128
    g = torch.Generator().manual_seed(t)
    q, k, v = (torch.randn(1, 2, L, d, generator=g) for _ in range(3))
    W = torch.randn(64, d, generator=g)
    later_k, later_v = k.clone(), v.clone()
    later_k[..., t + 1:, :] = wild_keys(L, d, t)[..., t + 1:, :].float()  # spans end elsewhere, constants differ
    later_v[..., t + 1:, :] *= 100
    out = sketchcore.performer_attention(q, k, v, W, causal=True)
    out_later = sketchcore.performer_attention(q, later_k, later_v, W, causal=True)
    assert torch.equal(out[..., :t + 1, :], out_later[..., :t + 1, :])
    assert not torch.equal(out[..., t + 1:, :], out_later[..., t + 1:, :])


@pytest.mark.parametrize("causal", [False, True])
def test_sums_over_2_to_the_24_keys_stay_exact_in_float32(causal):
    # relu features of all-ones keys and values: every output is exactly 1. Plain float32 running sums
    # drifted (2²⁸ + 1 keys gave 1.000007, 2³⁰ + 1 gave 3.99997); compensated block sums do not.
    n = 2**24 + 1
    ones = np.ones((1, 1, n, 1), np.float32)
    q = ones if causal else ones[:, :, :3]
    out = sketchcore.performer_attention(q, ones, ones, np.ones((1, 1), np.float32), kernel="relu", causal=causal)
    assert np.abs(np.asarray(out, np.float64) - 1).max() <= 1e-5


def test_sparse_inputs_are_refused_naming_the_argument():
    q, W = torch.randn(1, 2, 5, 4), torch.randn(8, 4)
    with pytest.raises(TypeError, match=r"features: expected a dense \(strided\) tensor, got layout torch.sparse_coo"):
        performer_attention(q, q, q, W.to_sparse())
    with pytest.raises(TypeError, match=r"features: expected a dense \(strided\) tensor, got layout torch.sparse_coo"):
        sketchcore.performer_attention(q, q, q, W.to_sparse())
    with pytest.raises(TypeError, match=r"k: expected a dense \(strided\) tensor, got layout torch.sparse_coo"):
        performer_attention(q, q.to_sparse(), q, W)
    with pytest.raises(TypeError, match=r"x: expected a dense \(strided\) tensor, got layout torch.sparse_csr"):
        sketchcore.sketched_matmul(torch.randn(3, 4).to_sparse_csr(), torch.randn(4, 2), torch.randn(2, 3))


def test_meta_tensors_give_shapes_through_torch_and_a_clear_error_through_the_array_api():
    q, W = torch.randn(1, 2, 5, 4, device="meta"), torch.randn(8, 4, device="meta")
    v = torch.randn(1, 2, 5, 3, device="meta", requires_grad=True)
    out = performer_attention(q, q, v, W, causal=True)
    assert out.device.type == "meta" and out.shape == (1, 2, 5, 3)
    with pytest.raises(TypeError, match="q: expected a tensor with data, got one on the 'meta' device"):
        sketchcore.performer_attention(q, q, v.detach(), W)


@pytest.mark.parametrize("ndim", [-1, -(2**31)])
def test_a_capsule_with_a_negative_ndim_is_refused_naming_the_argument(ndim):
    from _fake_dlpack import FakeProducer
    a = np.ones((1, 2, 5, 4), np.float32)
    W = np.ones((8, 4), np.float32)
    with pytest.raises(ValueError, match=rf"k: expected a DLPack tensor with 0 <= ndim <= 64, got ndim {ndim}"):
        sketchcore.performer_attention(a, FakeProducer(a, ndim=ndim), a, W)
