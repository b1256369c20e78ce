"""The e4m3 (fp8) host side: the encoding against a float64 reference that enumerates all 256
codes, per-column weight quantization, Fp8Factor's checks, and fp8_sketched_matmul's refusals on
this machine (no CPU kernel; the CUDA path is tests/gpu/test_gpu_fp8.py)."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sketchcore


def code_value(code):
    """The float64 value of an e4m3 code from its bit fields (None for the two NaN codes)."""
    sign = -1.0 if code & 0x80 else 1.0
    exponent, mantissa = (code >> 3) & 0xF, code & 0x7
    if exponent == 0xF and mantissa == 0x7:
        return None
    if exponent == 0:
        return sign * math.ldexp(mantissa / 8.0, -6)
    return sign * math.ldexp(1.0 + mantissa / 8.0, exponent - 7)


POSITIVE = [(code, code_value(code)) for code in range(0x7F)]  # +0 … 448, increasing


def reference_code(value):
    """The nearest e4m3 code to `value` (float64), ties to the even code, saturating at ±448."""
    if math.isnan(value):
        return 0x7F
    sign = 0x80 if math.copysign(1.0, value) < 0 else 0
    magnitude = min(abs(value), 448.0)
    best = min(POSITIVE, key=lambda cv: (abs(cv[1] - magnitude), cv[0] % 2))
    return sign | best[0]


def test_all_256_codes_decode_to_their_bit_fields_value():
    decoded = sketchcore.e4m3_decode(np.arange(256, dtype=np.uint8))
    for code in range(256):
        expected = code_value(code)
        if expected is None:
            assert np.isnan(decoded[code]), code
        else:
            assert decoded[code] == expected, (code, decoded[code], expected)
    assert POSITIVE[-1][1] == 448.0 and POSITIVE[1][1] == 2.0 ** -9


def test_every_code_value_and_every_tie_between_neighbours_encodes_as_the_reference():
    values = []
    for (_, low), (_, high) in zip(POSITIVE, POSITIVE[1:]):
        mid = (low + high) / 2  # exact in float32: e4m3 values have 4 significant bits
        values += [low, mid, np.nextafter(np.float32(mid), np.float32(0)), np.nextafter(np.float32(mid), np.float32(1e9))]
    values += [448.0, 456.0, 464.0, 1e30, np.inf, 2.0 ** -10, 2.0 ** -11, 3 * 2.0 ** -11, 1e-40, 0.0]
    v = np.array(values, dtype=np.float32)
    v = np.concatenate([v, -v])
    got = sketchcore.e4m3_encode(v)
    expected = np.array([reference_code(float(x)) for x in v], dtype=np.uint8)
    np.testing.assert_array_equal(got, expected)


def test_nan_negative_zero_and_saturation():
    got = sketchcore.e4m3_encode(np.array([np.nan, -0.0, -np.inf, np.inf, 500.0, -449.0], np.float32))
    assert got.tolist() == [0x7F, 0x80, 0xFE, 0x7E, 0x7E, 0xFE]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=-600.0, max_value=600.0, width=32, allow_subnormal=True), min_size=1, max_size=64))
def test_random_float32_values_encode_as_the_reference(values):
    v = np.array(values, dtype=np.float32)
    expected = np.array([reference_code(float(x)) for x in v], dtype=np.uint8)
    np.testing.assert_array_equal(sketchcore.e4m3_encode(v), expected)


def test_encode_and_decode_check_their_dtypes_and_keep_shapes():
    assert sketchcore.e4m3_encode(np.ones((2, 3), np.float32)).shape == (2, 3)
    with pytest.raises(TypeError, match="e4m3_encode: values: expected dtype float32, got float64"):
        sketchcore.e4m3_encode(np.ones(3))
    with pytest.raises(TypeError, match="e4m3_decode: codes: expected dtype uint8, got int8"):
        sketchcore.e4m3_decode(np.ones(3, np.int8))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 9), st.integers(1, 9), st.integers(0, 2 ** 31 - 1))
def test_quantize_e4m3_is_within_half_a_step_of_each_value(rows, cols, seed):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((rows, cols)) * rng.uniform(1e-3, 1e3, size=cols)).astype(np.float32)
    if cols > 1:
        w[:, 0] = 0.0  # an all-zero column
    codes, scale = sketchcore.quantize_e4m3(w)
    assert codes.dtype == np.uint8 and scale.dtype == np.float32 and codes.shape == w.shape
    w64 = w.astype(np.float64)
    max_abs = np.abs(w64).max(axis=0) if rows else np.zeros(cols)
    np.testing.assert_allclose(scale, np.where(max_abs == 0, 1.0, max_abs / 448.0), rtol=1e-7)
    deq = np.array([[code_value(int(c)) for c in row] for row in codes]).reshape(w.shape) * scale
    # Half a step of e4m3: 2^-4 relative for normals, 2^-10 (of the scale) below 2^-6.
    bound = np.maximum(np.abs(w64) * 2.0 ** -4, 2.0 ** -10 * scale.astype(np.float64)) * (1 + 1e-6)
    assert np.all(np.abs(deq - w64) <= bound)
    for j in range(cols):
        if max_abs[j] > 0:
            assert 0x7E in (codes[:, j] & 0x7F), "a column's largest value is ±448"
        else:
            assert not codes[:, j].any()


def test_quantize_e4m3_refusals():
    with pytest.raises(ValueError, match="quantize_e4m3: w: expected a 2-D array"):
        sketchcore.quantize_e4m3(np.ones(3, np.float32))
    with pytest.raises(ValueError, match="quantize_e4m3: w: expected finite values"):
        sketchcore.quantize_e4m3(np.array([[np.inf]], np.float32))
    with pytest.raises(TypeError, match="quantize_e4m3: w: expected a floating dtype, got int32"):
        sketchcore.quantize_e4m3(np.ones((2, 2), np.int32))


def test_fp8_factor_keeps_codes_and_scales_from_any_strides():
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 256, size=(7, 5), dtype=np.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0
    scale = rng.uniform(0.0, 2.0, size=5).astype(np.float32)
    f = sketchcore.Fp8Factor(np.asfortranarray(codes), scale)
    assert f.shape == (7, 5) and f.nbytes == 16 * 16 + 16 * 4
    np.testing.assert_array_equal(f.codes, codes)
    np.testing.assert_array_equal(f.scale, scale)
    flipped = codes.T[::-1]  # negative row stride, column stride 5
    g = sketchcore.Fp8Factor(flipped, np.ones(7, np.float32))
    np.testing.assert_array_equal(g.codes, flipped)


def test_fp8_factor_refusals_name_the_argument_and_the_value():
    ok = np.zeros((2, 2), np.uint8)
    one = np.ones(2, np.float32)
    bad = ok.copy()
    bad[1, 0] = 0xFF
    with pytest.raises(ValueError, match=r"Fp8Factor: codes: expected finite e4m3 codes \(not 0x7f or 0xff, the "
                                         r"NaNs\), got 255 at index \(1, 0\)"):
        sketchcore.Fp8Factor(bad, one)
    with pytest.raises(ValueError, match=r"Fp8Factor: scale: expected finite non-negative values, got -1\.0+ at index 1"):
        sketchcore.Fp8Factor(ok, np.array([1.0, -1.0], np.float32))
    with pytest.raises(TypeError, match="Fp8Factor: codes: expected dtype uint8 .e4m3 codes., got int8"):
        sketchcore.Fp8Factor(ok.astype(np.int8), one)
    with pytest.raises(ValueError, match=r"Fp8Factor: scale: expected shape \(2,\)"):
        sketchcore.Fp8Factor(ok, np.ones(3, np.float32))
    with pytest.raises(TypeError, match="Fp8Factor: scale: expected dtype float32, got float64"):
        sketchcore.Fp8Factor(ok, np.ones(2))
