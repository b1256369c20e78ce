"""Performer attention's CUDA kernels (src/cuda/performer_*.cu) against the float64 reference on the
CPU (the layer's composite formulas): outputs and gradients for every dtype, both kernels, causal
or not, key and value weights, odd lengths, lengths and feature counts that are not multiples of
the 64-row tiles, S ≠ L, feature counts that need fewer rows per block, ties of the maxima (the
listed ones and more than the list holds), a padded causal prefix; the layer on CUDA against the
layer on the CPU; the caller's stream; memory linear in L; gradcheck and torch.compile.

Every test here needs a CUDA device and is skipped without one. Written before any GPU run (no
device in the session that wrote the kernels): the first run is the kernels' first test. The
kernels are the gated path cuda_performer_kernels: every test runs with the gate closed (torch
tensors take the composite formula, other calls are refused) and open (the kernels), and
test_the_gate_decides_which_path_runs checks which one ran.
"""
import pytest

import sketchcore

torch = pytest.importorskip("torch")
from sketchcore.torch import RandMultiHeadAttention, performer_attention  # noqa: E402
from sketchcore.torch.layers._attention import orthogonal_features  # noqa: E402
from sketchcore.torch.ops._performer_formulas import reference_attention  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not sketchcore.build_info()["cuda"] or sketchcore.cuda_device_count() == 0
                       or not torch.cuda.is_available(), reason="needs the CUDA backend and a CUDA device"),
]

# Relative error against float64 the arithmetic allows: float32 accumulation everywhere, inputs and
# outputs rounded to 16 bits for the 16-bit types.
DTYPES = {torch.float64: 1e-12, torch.float32: 2e-5, torch.float16: 5e-3, torch.bfloat16: 3e-2}
KERNELS = ("softmax", "relu")


@pytest.fixture(autouse=True, params=[False, True], ids=["gate_closed", "gate_open"])
def gate(request):
    """Both sides of the gate: closed (the composite formula, the default) and open (the kernels)."""
    with sketchcore.gated_path("cuda_performer_kernels", request.param):
        yield request.param


def relative_error(a, b):
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return torch.linalg.norm(a - b).item() / max(torch.linalg.norm(b).item(), 1e-300)


def problem(B, H, L, S, d, e, m, dtype, seed=0, weights=True):
    gen = torch.Generator().manual_seed(seed)

    def draw(*shape):  # rounded to dtype first: the reference sees the values the kernels see
        return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype).double()
    q, k, v = draw(B, H, L, d), draw(B, H, S, d), draw(B, H, S, e)
    W = orthogonal_features(m, d, seed=seed, dtype=torch.float64).float().double()
    kw = vw = None
    if weights:
        kw = (torch.rand(B, S, generator=gen) > 0.3).double()
        kw[:, 0] = 1
        vw = (torch.rand(B, H, S, generator=gen, dtype=torch.float64) * 2).float().double()
    return q, k, v, W, kw, vw


def on_device(t, dtype):
    return None if t is None else t.to(device="cuda", dtype=dtype)


def check(shape, kernel, causal, dtype, weights=True, W=None):
    B, H, L, S, d, e, m = shape
    q, k, v, W0, kw, vw = problem(B, H, L, S, d, e, m, dtype, weights=weights)
    W = W0 if W is None else W
    grad = torch.randn(B, H, L, e, dtype=torch.float64).to(dtype).double()
    qr, kr, vr = (t.clone().requires_grad_() for t in (q, k, v))
    ref = reference_attention(qr, kr, vr, W, kernel, causal, kw, vw)
    ref.backward(grad)
    wd = torch.float32 if dtype != torch.float64 else torch.float64  # features and weights: float32 or q's
    qc, kc, vc = (t.to(device="cuda", dtype=dtype).requires_grad_() for t in (q, k, v))
    out = performer_attention(qc, kc, vc, W.to("cuda", wd), kernel=kernel, causal=causal,
                              key_weights=on_device(kw, wd), value_weights=on_device(vw, wd))
    out.backward(grad.to("cuda", dtype))
    tolerance = DTYPES[dtype]
    assert out.dtype == dtype and out.device.type == "cuda"
    assert relative_error(out, ref) <= tolerance
    for ours, expected in ((qc.grad, qr.grad), (kc.grad, kr.grad), (vc.grad, vr.grad)):
        assert relative_error(ours, expected) <= 4 * tolerance


SHAPES = [  # B, H, L, S, d, e, m
    (2, 3, 300, 300, 64, 64, 256),
    (1, 2, 1, 1, 8, 5, 5),
    (1, 1, 130, 77, 12, 40, 40),
    (3, 1, 129, 129, 7, 3, 70),
    (1, 2, 200, 200, 128, 96, 130),
]


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_forward_and_backward_match_the_float64_reference(shape, kernel, causal, dtype):
    if causal and shape[2] != shape[3]:
        pytest.skip("causal attention has S = L")
    check(shape, kernel, causal, dtype)


@pytest.mark.parametrize("causal", [False, True])
def test_many_features_need_fewer_rows_per_block(causal):
    check((1, 2, 150, 150, 64, 64, 1000), "softmax", causal, torch.float32)


@pytest.mark.parametrize("weights", [False, True])
def test_ties_listed_and_beyond_the_list(weights):
    """Duplicated features: tied maxima in the query rows and the keys' constant; with every feature
    the same, the keys' maximum has m ≥ 100 tied entries, more than the 64 the kernels list (the
    fix-up finds them again)."""
    W = orthogonal_features(8, 8, seed=1, dtype=torch.float64)
    W[1] = W[0]
    W[3] = W[0]
    check((2, 2, 50, 40, 8, 8, 8), "softmax", False, torch.float64, weights, W=W)
    same = orthogonal_features(1, 8, seed=2, dtype=torch.float64).expand(100, 8).contiguous()
    check((1, 2, 30, 30, 8, 8, 100), "softmax", False, torch.float64, weights, W=same)


def test_a_padded_causal_prefix_gives_finite_gradients(gate):
    # The composite formula gives a query whose keys so far are all padded a zero gradient (it was NaN).
    q, k, v, W, kw, vw = problem(2, 2, 150, 150, 16, 16, 32, torch.float32)
    kw[0, :5] = 0
    qc, kc, vc = (t.cuda().float().requires_grad_() for t in (q, k, v))
    out = performer_attention(qc, kc, vc, W.cuda().float(), causal=True, key_weights=kw.cuda().float(),
                              value_weights=vw.cuda().float())
    out.sum().backward()
    assert all(torch.isfinite(t).all() for t in (out, qc.grad, kc.grad, vc.grad))


@pytest.mark.parametrize("causal", [False, True])
def test_the_layer_on_cuda_matches_the_layer_on_the_cpu(causal):
    torch.manual_seed(0)
    layer = RandMultiHeadAttention(256, 4, 128, iscausal=causal)
    x = torch.randn(2, 333, 256)
    padding = torch.zeros(2, 333, dtype=torch.bool)
    padding[1, 300:] = True
    expected = layer(x, x, x, key_padding_mask=None if causal else padding)[0]
    layer.cuda()
    ours = layer(x.cuda(), x.cuda(), x.cuda(), key_padding_mask=None if causal else padding.cuda())[0]
    assert relative_error(ours, expected) <= 1e-5
    with torch.autocast("cuda", dtype=torch.bfloat16):
        half = layer(x.cuda(), x.cuda(), x.cuda())[0]
    assert half.dtype == torch.bfloat16 and relative_error(half, layer.cpu()(x, x, x)[0]) <= 3e-2


def test_the_gate_decides_which_path_runs(gate):
    """Closed: the array API refuses CUDA arrays naming the path, and the torch function is the
    composite formula bit for bit (compact (B, H, L, e) memory). Open: the kernels, whose output
    lies as (B, L, H, e) in memory (causal relu here: causal softmax below float64 is refused by the
    kernels and takes the composite formula either way)."""
    q, k, v, W, kw, vw = (None if t is None else t.cuda().float() for t in problem(2, 3, 50, 50, 16, 8, 32,
                                                                                  torch.float32))
    out = performer_attention(q, k, v, W, kernel="relu", causal=True, key_weights=kw, value_weights=vw)
    composite = reference_attention(q, k, v, W, "relu", True, kw, vw).to(q.dtype)
    if gate:
        assert out.transpose(1, 2).is_contiguous()
        assert torch.equal(out, sketchcore.performer_attention(q, k, v, W, kernel="relu", causal=True,
                                                               key_weights=kw, value_weights=vw))
        assert relative_error(out, composite) <= DTYPES[torch.float32]
    else:
        assert out.is_contiguous() and torch.equal(out, composite)
        with pytest.raises(RuntimeError, match=r"performer_attention on a CUDA device: .*'cuda_performer_kernels'"
                                               r".*SKETCHCORE_CUDA_UNVERIFIED=1"):
            sketchcore.performer_attention(q, k, v, W, causal=True)


def test_causal_softmax_below_float64_is_refused_by_the_kernels_and_composite_in_torch(gate):
    """The fused kernels' causal softmax keys still take a fixed constant that underflows from head
    dimension 128 on: with the gate open the array API refuses them, and sketchcore.torch runs the
    stable composite formula (equal to the float64 reference at head dimension 128)."""
    q, k, v, W, _, _ = problem(1, 2, 300, 300, 128, 16, 64, torch.float32, weights=False)
    refusal = ("causal softmax attention below float64 is not in the fused CUDA kernels" if gate
               else "cuda_performer_kernels")
    with pytest.raises(RuntimeError, match=refusal):
        sketchcore.performer_attention(q.cuda().float(), k.cuda().float(), v.cuda().float(), W.cuda().float(),
                                       causal=True)
    out = performer_attention(q.cuda().float(), k.cuda().float(), v.cuda().float(), W.cuda().float(), causal=True)
    assert relative_error(out, reference_attention(q, k, v, W, "softmax", True)) <= 1e-5


def test_runs_on_the_callers_stream(gate):
    q, k, v, W, kw, vw = (None if t is None else t.cuda().float() for t in problem(2, 4, 1000, 1000, 64, 64, 256,
                                                                                  torch.float32))
    if not gate:  # the array API has only the kernels: refused, on any stream
        with torch.cuda.stream(torch.cuda.Stream()), pytest.raises(RuntimeError, match="cuda_performer_kernels"):
            sketchcore.performer_attention(q, k, v, W, kernel="relu", causal=True)
        return
    expected = sketchcore.performer_attention(q, k, v, W, kernel="relu", causal=True)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            out = sketchcore.performer_attention(q, k, v, W, kernel="relu", causal=True)
    torch.cuda.current_stream().wait_stream(stream)
    assert torch.equal(out, expected)


def test_memory_is_linear_in_the_sequence_length():
    peaks = []
    for L in (8192, 32768):
        q = torch.randn(1, 8, L, 64, device="cuda", requires_grad=True)
        k, v = torch.randn_like(q, requires_grad=True), torch.randn_like(q, requires_grad=True)
        W = torch.randn(256, 64, device="cuda")
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        sketchcore.memory.device_reset_peak(0)
        before, pool_before = torch.cuda.memory_allocated(), sketchcore.memory.device_stats(0)["current_bytes"]
        performer_attention(q, k, v, W, causal=True).sum().backward()
        torch.cuda.synchronize()
        pool_peak = sketchcore.memory.device_stats(0)["peak_bytes"] - pool_before  # the kernels' temporaries
        peaks.append(torch.cuda.max_memory_allocated() - before + pool_peak)
    assert peaks[1] <= 5 * peaks[0]  # 4x the tokens: ~4x the memory, never 16x


def test_gradcheck_and_compile_on_cuda():
    q, k, v, W, kw, vw = (None if t is None else t.cuda() for t in problem(1, 2, 9, 9, 4, 3, 6, torch.float64))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    for causal in (False, True):
        assert torch.autograd.gradcheck(
            lambda q, k, v: performer_attention(q, k, v, W, causal=causal, key_weights=kw, value_weights=vw),
            (q, k, v))
    compiled = torch.compile(lambda q, k, v: performer_attention(q, k, v, W, causal=True), fullgraph=True,
                             backend="aot_eager")
    assert torch.equal(compiled(q, k, v), performer_attention(q, k, v, W, causal=True))
