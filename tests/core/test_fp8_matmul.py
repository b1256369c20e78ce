"""fp8_sketched_matmul's argument checks and refusals on a machine without a usable fp8 device:
the CPU is refused by name (there is no CPU fp8 kernel), arguments are checked before any device
is touched, and CUDA arrays meet the closed gated path cuda_fp8_factors (or, in a CPU-only build,
the missing backend). The product itself is tests/gpu/test_gpu_fp8.py."""
import numpy as np
import pytest

import sketchcore


@pytest.fixture
def factors():
    rng = np.random.default_rng(49)
    S = sketchcore.Fp8Factor(*sketchcore.quantize_e4m3(rng.standard_normal((4, 3)).astype(np.float32)))
    U = sketchcore.Fp8Factor(*sketchcore.quantize_e4m3(rng.standard_normal((3, 2)).astype(np.float32)))
    return S, U


def test_the_cpu_is_refused_naming_what_is_needed(factors):
    S, U = factors
    with pytest.raises(TypeError, match=r"fp8_sketched_matmul: x: expected an array on a CUDA device of compute "
                                        r"capability 8\.9 or newer \(there is no CPU fp8 kernel\), got cpu"):
        sketchcore.fp8_sketched_matmul(np.ones((2, 4), np.float32), S, U)
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="there is no CPU fp8 kernel"):
        sketchcore.fp8_sketched_matmul(torch.ones(2, 4), S, U)


def test_arguments_are_checked_before_the_device(factors):
    from _fake_dlpack import FakeProducer

    S, U = factors
    out = FakeProducer(np.empty((2, 2), np.float32), device=(2, 0))
    with pytest.raises(TypeError, match="fp8_sketched_matmul: S: expected an Fp8Factor, got Int8Factor"):
        sketchcore.fp8_sketched_matmul(np.ones((2, 4), np.float32), sketchcore.Int8Factor(
            np.ones((4, 3), np.int8), np.ones(3, np.float32)), U)
    with pytest.raises(ValueError, match=r"fp8_sketched_matmul: activation: expected one of .*got 'tanh'"):
        sketchcore.fp8_sketched_matmul(np.ones((2, 4), np.float32), S, U, activation="tanh")
    x5 = FakeProducer(np.ones((2, 5), np.float32), device=(2, 0))
    with pytest.raises(ValueError, match=r"fp8_sketched_matmul: S: expected d_in = 5 rows"):
        sketchcore.fp8_sketched_matmul(x5, S, U, out=out)
    x64 = FakeProducer(np.ones((2, 4), np.float64), device=(2, 0))
    with pytest.raises(TypeError, match=r"fp8_sketched_matmul: x: expected dtype float32, got float64"):
        sketchcore.fp8_sketched_matmul(x64, S, U, out=out)
    with pytest.raises(ValueError, match=r"fp8_sketched_matmul: U: expected 3 rows \(the columns of S\)"):
        sketchcore.fp8_sketched_matmul(np.ones((2, 4), np.float32), S, S)


@pytest.mark.skipif(sketchcore.cuda_device_count() > 0,
                    reason="host memory labelled as CUDA would reach a real device; tests/gpu/test_gpu_fp8.py covers devices")
def test_cuda_x_meets_the_gate_or_the_missing_backend(factors):
    from _fake_dlpack import FakeProducer

    S, U = factors
    x = FakeProducer(np.ones((2, 4), np.float32), device=(2, 0))
    out = FakeProducer(np.empty((2, 2), np.float32), device=(2, 0))
    if not sketchcore.build_info()["cuda"]:
        with pytest.raises(TypeError, match=r"fp8_sketched_matmul: x: expected a build of sketchcore with the CUDA "
                                            r"backend \(this one has none\) for a CUDA array, got cuda:0"):
            sketchcore.fp8_sketched_matmul(x, S, U, out=out)
        return
    with sketchcore.gated_path("cuda_fp8_factors", False):
        with pytest.raises(RuntimeError, match=r"fp8_sketched_matmul on a CUDA device: this runs the gated path "
                                               r"'cuda_fp8_factors'.*SKETCHCORE_CUDA_UNVERIFIED=1"):
            sketchcore.fp8_sketched_matmul(x, S, U, out=out)


def test_both_formats_are_one_factor_type_with_one_activation_table():
    """Int8Factor and Fp8Factor are the one quantized factor of sketchcore._quantized with the format
    fixed; _int8 and _fp8 re-export the same objects; every binding reads one activation table."""
    from sketchcore import _epilogue, _fastcall, _fp8, _int8, _quantized

    assert _int8.Int8Factor is _quantized.Int8Factor is sketchcore.Int8Factor
    assert _fp8.Fp8Factor is _quantized.Fp8Factor is sketchcore.Fp8Factor
    assert _int8.int8_sketched_matmul is _quantized.int8_sketched_matmul
    assert _fp8.fp8_sketched_matmul is _quantized.fp8_sketched_matmul
    assert _fastcall.ACTIVATION_CODES is _epilogue.ACTIVATION_CODES
    q = np.array([[1, -127], [0, 5], [127, 3]], np.int8)
    codes = np.array([[0x38, 0xB8], [0, 1], [0x7E, 0x40]], np.uint8)
    scale = np.array([0.5, 2.0], np.float32)
    i8, f8 = sketchcore.Int8Factor(q, scale), sketchcore.Fp8Factor(codes, scale)
    for f in (i8, f8):
        assert isinstance(f, _quantized.QuantizedFactor) and f.shape == (3, 2)
        np.testing.assert_array_equal(f.scale, scale)
    np.testing.assert_array_equal(i8.q, q)
    np.testing.assert_array_equal(f8.codes, codes)
    assert f8.nbytes == 16 * 16 + 16 * 4  # codes and scales, padded to 16
    assert i8.nbytes > f8.nbytes  # plus the CPU's int8 packing
    # The factor types are not interchangeable: each product names the type it needs.
    x = np.ones((1, 3), np.float32)
    with pytest.raises(TypeError, match="int8_sketched_matmul: S: expected an Int8Factor, got Fp8Factor"):
        sketchcore.int8_sketched_matmul(x, f8, f8)
    with pytest.raises(TypeError, match="int8_matmul: W: expected an Int8Factor, got Fp8Factor"):
        sketchcore.int8_matmul(x, f8)
    with pytest.raises(ValueError, match=r"Fp8Factor: codes: expected finite e4m3 codes .*got 255 at index \(1, 0\)"):
        sketchcore.Fp8Factor(np.array([[0], [0xFF]], np.uint8), np.ones(1, np.float32))
