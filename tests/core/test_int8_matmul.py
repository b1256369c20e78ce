"""The int8 sketched GEMM (sketchcore.int8_sketched_matmul, Int8Factor, quantize_int8): against a
reference of the same quantized math written here (the int32 sums are exact, so tight
tolerances), against the unquantized float64 product within the bound of the rounding steps,
every kernel family this CPU runs, strided and torch inputs, and every error path."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import sketchcore
from _reference import ACTIVATIONS, activate, dequantized, q8_rows, quantized_reference
from sketchcore import _int8

ISAS = [isa for isa in ("amx", "avx512_vnni", "avx_vnni", "avx2", "portable") if _int8.int8_gemm_isa_supported(isa)]


@pytest.fixture(params=ISAS)
def isa(request):
    """Runs the test with each int8 kernel family this CPU has, then restores the default."""
    before = _int8.int8_gemm_isa()
    _int8.set_int8_gemm_isa(request.param)
    yield request.param
    _int8.set_int8_gemm_isa(before)


def factor(rng, k, n):
    w = rng.standard_normal((k, n)).astype(np.float32)
    return sketchcore.Int8Factor(*sketchcore.quantize_int8(w)), w


def test_quantize_int8_matches_the_documented_formula(rng):
    w = rng.standard_normal((37, 19)).astype(np.float32) * 3
    w[:, 4] = 0
    q, scale = sketchcore.quantize_int8(w)
    max_abs = np.abs(w).max(axis=0)
    expected_scale = np.where(max_abs == 0, np.float32(1), (max_abs / np.float32(127)).astype(np.float32))
    np.testing.assert_array_equal(scale, expected_scale)
    assert q.dtype == np.int8 and scale.dtype == np.float32
    np.testing.assert_array_equal(q, np.clip(np.rint(w / expected_scale), -127, 127).astype(np.int8))
    assert np.abs(q).max() == 127 and (q[:, 4] == 0).all()
    assert (np.abs(q * scale.astype(np.float64) - w) <= scale / 2 * (1 + 1e-5)).all()


def test_quantize_int8_takes_torch_weights_of_any_float_dtype(rng):
    w = torch.from_numpy(rng.standard_normal((9, 5)).astype(np.float32)).requires_grad_()
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        q, scale = sketchcore.quantize_int8(w.to(dtype))
        expected = sketchcore.quantize_int8(w.detach().to(dtype).float().numpy())
        np.testing.assert_array_equal(q, expected[0])
        np.testing.assert_array_equal(scale, expected[1])


def test_factor_round_trips_values_scales_and_reports_its_size(rng):
    q = rng.integers(-127, 128, size=(13, 70), dtype=np.int8)
    scale = rng.random(70).astype(np.float32)
    f = sketchcore.Int8Factor(q[:, ::-1], scale)  # strided q
    assert f.shape == (13, 70)
    np.testing.assert_array_equal(f.q, q[:, ::-1])
    np.testing.assert_array_equal(f.scale, scale)
    assert f.nbytes >= 16 * 128 + 2 * 128 * 4  # 4 row groups × 2 panels × 256 B, scales and sums
    g = sketchcore.Int8Factor(torch.from_numpy(q), torch.from_numpy(scale))
    np.testing.assert_array_equal(g.q, q)


@pytest.mark.parametrize("inner", ["none", "relu"])
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_matches_the_quantized_reference(rng, isa, activation, inner):
    x = rng.standard_normal((2, 9, 70)).astype(np.float32)
    S, _ = factor(rng, 70, 33)
    U, _ = factor(rng, 33, 130)
    bias = rng.standard_normal(130).astype(np.float32)
    y = sketchcore.int8_sketched_matmul(x, S, U, bias=bias, activation=activation, inner_activation=inner)
    assert y.shape == (2, 9, 130) and y.dtype == np.float32
    ref = quantized_reference(x, S, U, bias, activation, inner)
    np.testing.assert_allclose(y, ref, rtol=2e-6, atol=2e-6 * np.abs(ref).max())


@pytest.mark.parametrize("inner", ["gelu", "gelu_tanh", "silu"])
def test_smooth_inner_activations_within_one_requantization_step(rng, isa, inner):
    # σ in float32 differs from the float64 σ by a few ulp, which can move a requantized value
    # by one step: at most one step of the row scale per element of the intermediate.
    x = rng.standard_normal((11, 40)).astype(np.float32)
    S, _ = factor(rng, 40, 24)
    U, _ = factor(rng, 24, 50)
    y = sketchcore.int8_sketched_matmul(x, S, U, inner_activation=inner)
    ref = quantized_reference(x, S, U, None, "none", inner)
    z = activate(dequantized(q8_rows(x)[0] @ S.q.astype(np.int64), q8_rows(x)[1], S.scale), inner)
    step = np.abs(z).max(axis=1, keepdims=True) / 127
    bound = step * (np.abs(U.q.astype(np.float64)) * U.scale).max(axis=0) * 2 + 1e-5 * np.abs(ref).max()
    assert (np.abs(y - ref) <= bound).all()


def test_within_the_quantization_error_of_the_float64_product(rng, isa):
    x = rng.standard_normal((7, 96)).astype(np.float32)
    S, s_w = factor(rng, 96, 40)
    U, u_w = factor(rng, 40, 72)
    y = sketchcore.int8_sketched_matmul(x, S, U).astype(np.float64)
    x64, S64, U64 = x.astype(np.float64), s_w.astype(np.float64), u_w.astype(np.float64)
    z = x64 @ S64
    sx = np.abs(x64).max(axis=1, keepdims=True) / 127
    cs, cu = S.scale.astype(np.float64), U.scale.astype(np.float64)
    # |deq(q8(x)·S_q) − x·S| ≤ Σ_k (sx/2·|S| + |x|·cs/2 + sx·cs/4)
    e1 = sx / 2 * np.abs(S64).sum(axis=0) + np.abs(x64) @ np.ones_like(S64) * cs / 2 + sx * cs / 4 * 96
    sz = (np.abs(z) + e1).max(axis=1, keepdims=True) / 127
    # then the requantization (≤ sz/2) and U's rounding (≤ cu/2)
    bound = (e1 + sz / 2) @ (np.abs(U64) + cu / 2) + np.abs(z) @ np.ones_like(U64) * cu / 2
    assert (np.abs(y - z @ U64) <= bound * (1 + 1e-5) + 1e-5).all()
    assert np.linalg.norm(y - z @ U64) < 0.05 * np.linalg.norm(z @ U64)  # and it is a good approximation


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(0, 13), d_in=st.integers(1, 70), rank=st.integers(0, 70), d_out=st.integers(0, 140),
       seed=st.integers(0, 2**32 - 1))
def test_shapes_that_are_not_multiples_of_the_blocking(rows, d_in, rank, d_out, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, d_in)).astype(np.float32)
    S, _ = factor(rng, d_in, rank)
    U, _ = factor(rng, rank, d_out)
    bias = rng.standard_normal(d_out).astype(np.float32)
    for isa in ISAS:
        _int8.set_int8_gemm_isa(isa)
        y = sketchcore.int8_sketched_matmul(x, S, U, bias=bias, activation="relu")
        ref = quantized_reference(x, S, U, bias, "relu", "none")
        np.testing.assert_allclose(y, ref, rtol=2e-6, atol=1e-5 * max(1.0, np.abs(ref).max(initial=0)))
    _int8.set_int8_gemm_isa(ISAS[0])


def test_zero_and_non_finite_rows(rng, isa):
    x = rng.standard_normal((3, 20)).astype(np.float32)
    x[0] = 0
    x[2, 5] = np.inf
    S, _ = factor(rng, 20, 8)
    U, _ = factor(rng, 8, 5)
    bias = rng.standard_normal(5).astype(np.float32)
    y = sketchcore.int8_sketched_matmul(x, S, U, bias=bias)
    np.testing.assert_array_equal(y[0], bias)  # an all-zero row is exactly zero before the bias
    assert np.isnan(y[2]).all() and np.isfinite(y[1]).all()


def test_rows_with_a_subnormal_maximum_quantize_as_their_scaled_copies(rng, isa):
    # 127 / max overflows for a maximum under about 3.7e-37: a zero would become 0 · inf = NaN and
    # clamp to -127, every other value to ±127. A row times 2^-130 (exact: few mantissa bits) has
    # the row's own codes; its output follows the documented steps (the scales, subnormal, round
    # coarsely, so the output is compared with the step-by-step reference, not with the row's).
    pattern = rng.integers(-8, 9, size=(1, 40)).astype(np.float32) / 4
    pattern[0, :3] = (0.0, 2.0, -1.5)
    tiny = pattern * np.float32(2.0**-130)
    x = np.concatenate([pattern, tiny])
    assert 0 < np.abs(tiny).max() < np.finfo(np.float32).tiny  # a subnormal maximum
    np.testing.assert_array_equal(q8_rows(tiny)[0], q8_rows(pattern)[0])
    S, _ = factor(rng, 40, 8)
    U, _ = factor(rng, 8, 6)
    y = sketchcore.int8_sketched_matmul(x, S, U)
    assert np.isfinite(y).all() and np.abs(y[1]).max() > 0
    ref = quantized_reference(x, S, U, None, "none", "none")
    np.testing.assert_allclose(y, ref, rtol=2e-6, atol=2e-6 * np.abs(ref[1]).max())


def test_strided_x_torch_in_torch_out_and_out_argument(rng, isa):
    base = rng.standard_normal((4, 6, 2 * 30)).astype(np.float32)
    x = base[:, ::-2, ::2]  # leading dimensions that do not collapse, non-unit column stride
    S, _ = factor(rng, 30, 16)
    U, _ = factor(rng, 16, 9)
    ref = quantized_reference(np.ascontiguousarray(x), S, U, None, "none", "none")
    np.testing.assert_allclose(sketchcore.int8_sketched_matmul(x, S, U), ref, rtol=2e-6, atol=1e-6)
    t = torch.from_numpy(base).requires_grad_()[:, ::2, ::2]
    y = sketchcore.int8_sketched_matmul(t, S, U)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32
    np.testing.assert_allclose(y.numpy(), quantized_reference(t.detach().numpy(), S, U, None, "none", "none"),
                               rtol=2e-6, atol=1e-6)
    out = np.full((4, 3, 9), np.nan, np.float32)
    assert sketchcore.int8_sketched_matmul(x, S, U, out=out) is out
    np.testing.assert_allclose(out, ref, rtol=2e-6, atol=1e-6)


def test_factor_errors():
    q = np.zeros((4, 3), np.int8)
    s = np.ones(3, np.float32)
    with pytest.raises(TypeError, match=r"Int8Factor: q: expected dtype int8, got int16"):
        sketchcore.Int8Factor(q.astype(np.int16), s)
    with pytest.raises(ValueError, match=r"Int8Factor: q: expected a 2-D array \(k, n\), got shape \(12,\)"):
        sketchcore.Int8Factor(q.reshape(-1), s)
    with pytest.raises(TypeError, match=r"Int8Factor: scale: expected dtype float32, got float64"):
        sketchcore.Int8Factor(q, s.astype(np.float64))
    with pytest.raises(ValueError, match=r"Int8Factor: scale: expected shape \(3,\) .*got \(4,\)"):
        sketchcore.Int8Factor(q, np.ones(4, np.float32))
    with pytest.raises(ValueError, match=r"Int8Factor: scale: expected finite non-negative values, got -1.0+ at index 1"):
        sketchcore.Int8Factor(q, np.array([1, -1, 1], np.float32))
    with pytest.raises(ValueError, match=r"Int8Factor: scale: expected finite non-negative values, got nan at index 2"):
        sketchcore.Int8Factor(q, np.array([1, 1, np.nan], np.float32))
    bad = q.copy()
    bad[2, 1] = -128
    with pytest.raises(ValueError, match=r"Int8Factor: q: expected values in \[-127, 127\].*got -128 at index \(2, 1\)"):
        sketchcore.Int8Factor(bad, s)
    with pytest.raises(TypeError, match=r"Int8Factor: q: expected an array .*got list"):
        sketchcore.Int8Factor([[1]], s)


def test_quantize_errors():
    with pytest.raises(TypeError, match=r"quantize_int8: w: expected a floating dtype, got int32"):
        sketchcore.quantize_int8(np.ones((2, 2), np.int32))
    with pytest.raises(ValueError, match=r"quantize_int8: w: expected a 2-D array"):
        sketchcore.quantize_int8(np.ones(3, np.float32))
    with pytest.raises(ValueError, match=r"quantize_int8: w: expected finite values"):
        sketchcore.quantize_int8(np.array([[1.0, np.nan]]))


def test_matmul_errors(rng):
    S, _ = factor(rng, 6, 4)
    U, _ = factor(rng, 4, 5)
    x = np.ones((2, 6), np.float32)
    call = sketchcore.int8_sketched_matmul
    with pytest.raises(TypeError, match=r"int8_sketched_matmul: S: expected an Int8Factor, got ndarray"):
        call(x, np.ones((6, 4), np.float32), U)
    with pytest.raises(TypeError, match=r"int8_sketched_matmul: U: expected an Int8Factor, got NoneType"):
        call(x, S, None)
    with pytest.raises(TypeError, match=r"int8_sketched_matmul: x: expected dtype float32, got float64"):
        call(x.astype(np.float64), S, U)
    with pytest.raises(ValueError, match=r"int8_sketched_matmul: S: expected d_in = 7 rows .*got shape \(6, 4\)"):
        call(np.ones((2, 7), np.float32), S, U)
    with pytest.raises(ValueError, match=r"int8_sketched_matmul: U: expected 4 rows .*got shape \(6, 4\)"):
        call(x, S, S)
    with pytest.raises(ValueError, match=r"int8_sketched_matmul: x: expected at least 1 dimension"):
        call(np.ones((), np.float32), S, U)
    with pytest.raises(ValueError, match=r"int8_sketched_matmul: bias: expected shape \(5,\), got shape \(4,\)"):
        call(x, S, U, bias=np.ones(4, np.float32))
    with pytest.raises(TypeError, match=r"int8_sketched_matmul: bias: expected dtype float32, got float64"):
        call(x, S, U, bias=np.ones(5))
    with pytest.raises(ValueError, match=r"int8_sketched_matmul: activation: expected one of .*got 'tanh'"):
        call(x, S, U, activation="tanh")
    with pytest.raises(TypeError, match=r"int8_sketched_matmul: inner_activation: expected a str"):
        call(x, S, U, inner_activation=1)
    with pytest.raises(ValueError, match=r"int8_sketched_matmul: out: expected shape \(2, 5\), got shape \(2, 4\)"):
        call(x, S, U, out=np.empty((2, 4), np.float32))
    with pytest.raises(ValueError, match=r"int8_sketched_matmul: out: expected unit column stride"):
        call(x, S, U, out=np.empty((2, 10), np.float32)[:, ::2])
    read_only = np.empty((2, 5), np.float32)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match=r"int8_sketched_matmul: out: expected a writable array"):
        call(x, S, U, out=read_only)
    shared = np.zeros((2, 6), np.float32)
    with pytest.raises(ValueError, match=r"int8_sketched_matmul: out: expected no overlap with x"):
        call(shared, S, sketchcore.Int8Factor(np.zeros((4, 6), np.int8), np.ones(6, np.float32)), out=shared)


def test_isa_selection_errors():
    with pytest.raises(ValueError, match=r"set_int8_gemm_isa: name: expected one of .*got 'sse9'"):
        _int8.set_int8_gemm_isa("sse9")
    assert _int8.int8_gemm_isa() in ISAS


def test_concurrent_calls_share_factors(rng):
    from concurrent.futures import ThreadPoolExecutor

    S, _ = factor(rng, 64, 32)
    U, _ = factor(rng, 32, 64)
    xs = [rng.standard_normal((5, 64)).astype(np.float32) for _ in range(8)]
    with ThreadPoolExecutor(4) as pool:
        ys = list(pool.map(lambda x: sketchcore.int8_sketched_matmul(x, S, U, activation="gelu"), xs))
    for x, y in zip(xs, ys):
        np.testing.assert_allclose(y, quantized_reference(x, S, U, None, "gelu", "none"), rtol=2e-6, atol=1e-5)


@pytest.mark.skipif(sketchcore.cuda_device_count() > 0,
                    reason="host memory labelled as CUDA would reach a real device; tests/gpu/test_gpu_int8.py covers devices")
def test_cuda_x_is_refused_before_any_device_is_touched(rng):
    # Host memory labelled as CUDA memory, as DLPack describes it: validated like any CUDA array, then
    # refused by a CPU-only build (TypeError naming the device) or, in a CUDA build, by the closed
    # gated path cuda_int8_factors (RuntimeError naming it and how to open it) — never a crash.
    from _fake_dlpack import FakeProducer

    S, _ = factor(rng, 4, 3)
    U, _ = factor(rng, 3, 2)
    x = FakeProducer(np.ones((2, 4), np.float32), device=(2, 0))
    out = FakeProducer(np.empty((2, 2), np.float32), device=(2, 0))
    if not sketchcore.build_info()["cuda"]:
        with pytest.raises(TypeError, match=r"int8_sketched_matmul: x: expected an array in CPU memory "
                                            r"\(this build of sketchcore has no CUDA backend\), got cuda:0"):
            sketchcore.int8_sketched_matmul(x, S, U, out=out)
        return
    with sketchcore.gated_path("cuda_int8_factors", False):
        with pytest.raises(RuntimeError, match=r"int8_sketched_matmul on a CUDA device: this runs the gated path "
                                               r"'cuda_int8_factors'.*SKETCHCORE_CUDA_UNVERIFIED=1"):
            sketchcore.int8_sketched_matmul(x, S, U, out=out)


def test_cuda_arguments_are_validated_before_the_device(rng):
    # Shapes and dtypes are the core's first checks, whatever the device (and whatever the build).
    from _fake_dlpack import FakeProducer

    S, _ = factor(rng, 4, 3)
    U, _ = factor(rng, 3, 2)
    x = FakeProducer(np.ones((2, 5), np.float32), device=(2, 0))
    with pytest.raises(ValueError, match=r"int8_sketched_matmul: S: expected d_in = 5 rows"):
        sketchcore.int8_sketched_matmul(x, S, U, out=FakeProducer(np.empty((2, 2), np.float32), device=(2, 0)))
    x64 = FakeProducer(np.ones((2, 4), np.float64), device=(2, 0))
    with pytest.raises(TypeError, match=r"int8_sketched_matmul: x: expected dtype float32, got float64"):
        sketchcore.int8_sketched_matmul(x64, S, U, out=FakeProducer(np.empty((2, 2), np.float32), device=(2, 0)))


def test_factors_from_other_frameworks_are_packed_on_the_host(rng):
    # A torch tensor is taken through its host copy (a CUDA one would be copied; a CPU one is read).
    q = rng.integers(-127, 128, size=(6, 5)).astype(np.int8)
    scale = rng.uniform(0.01, 1.0, size=5).astype(np.float32)
    f = sketchcore.Int8Factor(torch.from_numpy(q).t().contiguous().t(), torch.from_numpy(scale))
    np.testing.assert_array_equal(f.q, q)
    np.testing.assert_array_equal(f.scale, scale)


def test_environment_caps_the_kernel_family():
    import os
    import subprocess
    import sys

    env = dict(os.environ, SKETCHCORE_INT8_ISA="avx2")
    code = "from sketchcore import _int8; print(_int8.int8_gemm_isa())"
    chosen = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert chosen.stdout.strip().splitlines()[-1] == ("avx2" if "avx2" in ISAS else "portable")
