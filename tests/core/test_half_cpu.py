"""float16 and bfloat16 on the CPU (NumPy float16, torch bfloat16/float16): computed in float32
and rounded once into the input dtype — bit-for-bit what float32 arithmetic followed by a
round-to-nearest-even cast gives — for the forward, the backward, sketches and torch modules."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sketchcore

TOLERANCE = {np.dtype(np.float16): 5e-3}


def test_every_float16_value_survives_an_identity_product():
    x = np.arange(65536, dtype=np.uint16).view(np.float16).reshape(-1, 1)
    one = np.ones((1, 1), np.float16)
    y = sketchcore.sketched_matmul(x, one, one)
    assert y.dtype == np.float16
    finite = np.isfinite(x) & (x != 0)  # ±0: a GEMM sums from +0, so −0 comes back as +0
    np.testing.assert_array_equal(y[finite].view(np.uint16), x[finite].view(np.uint16))
    assert np.all(y[x == 0] == 0)
    assert np.all(np.isnan(y[np.isnan(x)])) and np.array_equal(y[np.isinf(x)], x[np.isinf(x)])


def test_rounding_is_float32_arithmetic_then_round_to_nearest_even(rng):
    x = rng.standard_normal((4096, 1)).astype(np.float16)
    S, U = np.array([[1.7]], np.float16), np.array([[-0.3]], np.float16)
    y = sketchcore.sketched_matmul(x, S, U, scale=1.5)
    expected = ((x.astype(np.float32) @ S.astype(np.float32)) @ U.astype(np.float32) * np.float32(1.5))
    np.testing.assert_array_equal(y.view(np.uint16), expected.astype(np.float16).view(np.uint16))


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(0, 40), d_in=st.integers(1, 30), k=st.integers(1, 6), d_out=st.integers(1, 20),
       terms=st.integers(1, 3), activation=st.sampled_from(sketchcore.ACTIVATIONS), seed=st.integers(0, 2**32 - 1))
def test_float16_forward_and_backward_against_float64(rows, d_in, k, d_out, terms, activation, seed):
    rng = np.random.default_rng(seed)
    draw = lambda *shape: (rng.standard_normal(shape) / np.sqrt(shape[-2] if len(shape) > 1 else 1)).astype(np.float16)  # noqa: E731
    x, S, U, b = draw(rows, d_in), draw(terms, d_in, k), draw(terms, k, d_out), draw(d_out)
    z = np.empty((rows, terms * k), np.float16)
    y = sketchcore.sketched_matmul(x, S, U, bias=b, activation=activation, intermediate=z)
    assert y.dtype == np.float16 and z.dtype == np.float16
    z64 = np.empty((rows, terms * k))
    args64 = [a.astype(np.float64) for a in (x, S, U)]
    y64 = sketchcore.sketched_matmul(*args64, bias=b.astype(np.float64), activation=activation, intermediate=z64)
    scale = max(np.linalg.norm(y64), 1e-3 * np.sqrt(y64.size) + 1e-300)
    assert np.linalg.norm(y.astype(np.float64) - y64) <= TOLERANCE[y.dtype] * scale
    g = draw(rows, d_out)
    grads = sketchcore.sketched_matmul_backward(g, x, S, U, z, bias=b, activation=activation)
    grads64 = sketchcore.sketched_matmul_backward(g.astype(np.float64), *args64, z.astype(np.float64),
                                                  bias=b.astype(np.float64), activation=activation)
    for got, want in zip(grads, grads64):
        assert got.dtype == np.float16
        tolerance = 2e-2 if activation != "none" else 5e-3  # act′ is evaluated at the float16-rounded Z
        assert np.linalg.norm(got.astype(np.float64) - want) <= tolerance * max(np.linalg.norm(want), 1e-2)


@pytest.mark.parametrize("kind", ["gaussian", "sparse_sign", "srht"])
def test_sketches_take_float16(rng, kind):
    op = getattr(sketchcore.sketch, kind)(16, 64, seed=5)
    A = rng.standard_normal((64, 7)).astype(np.float16)
    Y = op @ A
    assert Y.dtype == np.float16
    expected = op.to_dense() @ A.astype(np.float64)
    assert np.linalg.norm(Y.astype(np.float64) - expected) <= 5e-3 * np.linalg.norm(expected)
    dense16 = op.to_dense(dtype=np.float16)
    np.testing.assert_array_equal(dense16, op.to_dense(dtype=np.float32).astype(np.float16))


def test_torch_bfloat16_and_half_models_on_the_cpu():
    torch = pytest.importorskip("torch")
    from sketchcore.torch import LowRankLinear, SKLinear
    torch.manual_seed(0)
    for dtype, tolerance in ((torch.bfloat16, 2e-2), (torch.float16, 5e-3)):
        layer = SKLinear(32, 16, 2, 4)
        x = torch.randn(8, 32)
        expected = layer(x.double().float()).double()
        low = layer.to(dtype)
        y = low(x.to(dtype))
        assert y.dtype == dtype
        assert float(torch.linalg.norm(y.double() - expected) / torch.linalg.norm(expected)) <= tolerance * 2
        y.float().sum().backward()
        assert layer.S1s.grad is not None and layer.S1s.grad.dtype == dtype
        lr = LowRankLinear(32, 16, 4, dtype=dtype)
        assert lr(x.to(dtype)).dtype == dtype


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("rows, d_in, d_out", [(37, 24, 19), (1300, 1100, 19), (1300, 24, 1100)],
                         ids=["one-chunk", "x-staged-in-3-chunks", "out-staged-in-3-chunks"])
def test_strided_16bit_operands_and_out_match_float32_rounded_once(rng, dtype, rows, d_in, d_out):
    """x and out viewed with strides (staged chunk by chunk) and an intermediate: the result is
    the float32 computation on the widened values, rounded once (within one 16-bit ulp where
    the two GEMM layouts may sum in another order). 1100 staged float32 columns put 512 rows in
    a chunk (kStagingBytes 2 MiB, kMinStagedRows 512): chunks of 512, 512 and 276 rows, whose
    dropout masks continue across the chunks' borders."""
    torch = pytest.importorskip("torch")
    dt = getattr(torch, dtype)
    base = torch.from_numpy(rng.standard_normal((rows, 2 * d_in), dtype=np.float32)).to(dt)
    x = base[:, ::2]  # column stride 2: no in-place BLAS operand
    S = torch.from_numpy(rng.standard_normal((3, d_in, 5), dtype=np.float32) / np.sqrt(d_in)).to(dt)
    U = torch.from_numpy(rng.standard_normal((3, 5, d_out), dtype=np.float32) / 4).to(dt)
    b = torch.from_numpy(rng.standard_normal(d_out, dtype=np.float32)).to(dt)
    out_base = torch.zeros(d_out, rows, dtype=dt)
    out = out_base.t()  # row stride 1, column stride `rows`
    z = torch.empty(rows, 15, dtype=dt)
    kwargs = dict(bias=b, activation="gelu", dropout_p=0.25, seed=11)
    sketchcore.sketched_matmul(x, S, U, out=out, intermediate=z, **kwargs)
    z32 = torch.empty(rows, 15)
    y32 = sketchcore.sketched_matmul(x.float(), S.float(), U.float(), intermediate=z32,
                                     **{**kwargs, "bias": b.float()})
    # The two float32 computations may sum in another order: they differ by at most γ_n·(the same
    # computation on absolute values), n = d_in + 15 terms per output, which rounding to 16 bits can
    # turn into one more ulp. Where an output cancels to far below its terms' size (float16 found
    # 3-8 ulp of such outputs with fresh seeds), that sum-order bound is what one ulp of the output misses.
    z_size = x.float().abs() @ S.float().abs().permute(1, 0, 2).reshape(d_in, 15)
    out_size = (z_size @ U.float().abs().reshape(15, d_out) + b.float().abs()) * 1.2 / 0.75  # gelu' ≤ 1.13, dropout
    gamma = (d_in + 15) * 2.0 ** -24
    for got, want, size in ((out, y32.to(dt), out_size), (z, z32.to(dt), z_size)):
        gap = (got.float() - want.float()).abs()
        one_ulp = want.float().abs() * (2.0 ** -10 if dtype == "float16" else 2.0 ** -7) + 1e-30
        bound = one_ulp + 2 * gamma * size * (1 + 2.0 ** -10)
        assert torch.all(gap <= bound), float((gap / bound).max())
    assert torch.equal(out == 0, y32.to(dt) == 0)  # the same dropout mask (and the same underflows)


def test_16bit_forward_makes_no_full_size_float32_copy_of_x_or_out():
    """The 16-bit forward widens x and rounds y chunk by chunk: its pooled peak stays below the
    float32 copies of x and y that a widen-everything path needs (32 + 8 MiB here)."""
    rows, d_in, d_out = 8192, 1024, 256
    rng = np.random.default_rng(4)
    x = rng.standard_normal((rows, d_in)).astype(np.float16)
    S = (rng.standard_normal((d_in, 16)) / 32).astype(np.float16)
    U = (rng.standard_normal((16, d_out)) / 4).astype(np.float16)
    out = np.empty((rows, d_out), np.float16)
    sketchcore.sketched_matmul(x, S, U, out=out)
    sketchcore.memory.reset_peak()
    before = sketchcore.memory.stats()["current_bytes"]
    sketchcore.sketched_matmul(x, S, U, out=out)
    peak = sketchcore.memory.stats()["peak_bytes"] - before
    assert peak < 4 * (x.size + out.size), peak
    ref = (x.astype(np.float32) @ S.astype(np.float32)) @ U.astype(np.float32)
    assert np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref) < 5e-3


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16bit_backward_of_strided_operands_equals_the_float32_backward_of_the_same_values(dtype):
    """x and dL/dy with column strides and Z with a row stride (all staged chunk by chunk, in more
    than one chunk), dx rounded chunk by chunk: each gradient is the float32 backward of the same
    16-bit values, rounded once."""
    torch = pytest.importorskip("torch")
    dt = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(9)
    rows, d_in, d_out, terms, k = 1500, 48, 1100, 2, 5  # 1500 × 1100 float32 rows: two 4 MiB chunks
    x = torch.randn(rows, 2 * d_in, generator=gen).to(dt)[:, ::2]
    S, U = (torch.randn(terms, d_in, k, generator=gen) / 7).to(dt), (torch.randn(terms, k, d_out, generator=gen) / 3).to(dt)
    b, g = torch.randn(d_out, generator=gen).to(dt), torch.randn(rows, 2 * d_out, generator=gen).to(dt)[:, ::2]
    z = torch.empty(rows, 2 * terms * k, dtype=dt)[:, :terms * k]
    sketchcore.sketched_matmul(x, S, U, bias=b, activation="gelu", intermediate=z)
    got = sketchcore.sketched_matmul_backward(g, x, S, U, z, bias=b, activation="gelu", dropout_p=0.1, seed=4)
    want = sketchcore.sketched_matmul_backward(g.float(), x.float(), S.float(), U.float(), z.float(), bias=b.float(),
                                               activation="gelu", dropout_p=0.1, seed=4)
    for a, w in zip(got, want):
        assert a.dtype == dt
        gap = (a.float() - w.to(dt).float()).abs()
        one_ulp = w.abs() * (2.0 ** -10 if dtype == "float16" else 2.0 ** -7) + 1e-30
        # dS, dU, dbias sum over rows in float32 in another order: a few ulp; dx is per row
        assert torch.all(gap <= 4 * one_ulp), float((gap / one_ulp).max())


def test_16bit_backward_makes_no_full_size_float32_copy_of_x_dy_or_z():
    """The 16-bit backward widens x, dL/dy and Z and rounds dx chunk by chunk: its pooled peak
    stays below the float32 copies of x and dL/dy a widen-everything path needs (32 + 8 MiB)."""
    rows, d_in, d_out = 8192, 1024, 256
    rng = np.random.default_rng(5)
    x = rng.standard_normal((rows, d_in)).astype(np.float16)
    S = (rng.standard_normal((d_in, 16)) / 32).astype(np.float16)
    U = (rng.standard_normal((16, d_out)) / 4).astype(np.float16)
    g = rng.standard_normal((rows, d_out)).astype(np.float16)
    z = np.empty((rows, 16), np.float16)
    sketchcore.sketched_matmul(x, S, U, intermediate=z, activation="silu")
    sketchcore.sketched_matmul_backward(g, x, S, U, z, activation="silu")
    sketchcore.memory.reset_peak()
    before = sketchcore.memory.stats()["current_bytes"]
    dx, dS, dU = sketchcore.sketched_matmul_backward(g, x, S, U, z, activation="silu")[:3]
    peak = sketchcore.memory.stats()["peak_bytes"] - before
    assert peak < 4 * (x.size + g.size), peak
    want = sketchcore.sketched_matmul_backward(*(a.astype(np.float64) for a in (g, x, S, U, z)), activation="silu")[:3]
    for got, ref in zip((dx, dS, dU), want):
        assert np.linalg.norm(got.astype(np.float64) - ref) <= 2e-2 * np.linalg.norm(ref)
