"""The AMX-INT8 family of the int8 sketched GEMM: the same int32 sums as the AVX-512 VNNI family
(TDPBUSD and VPDPBUSD multiply the same u8 activations by the same s8 weights), so the results are
the same float32 bits for every shape (row counts below, at and past the 16-row tiles, inner
dimensions with and without a tail of groups past the 64-byte tile rows), epilogue and thread
count; its selection by name and environment; and the silent fallback to AVX-512 VNNI in a
process that Linux refuses the tile state."""
import os
import platform
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sketchcore
from _reference import dequantized, q8_rows, quantized_reference
from sketchcore import _int8

HAS_AMX = _int8.int8_gemm_isa_supported("amx")
needs_amx = pytest.mark.skipif(not HAS_AMX, reason="this CPU (or kernel) has no AMX-INT8")


def factor(rng, k, n):
    w = rng.standard_normal((k, n)).astype(np.float32)
    return sketchcore.Int8Factor(*sketchcore.quantize_int8(w))


def both_families(x, S, U, **kwargs):
    """The product with the AMX family and with the AVX-512 VNNI family (the default restored)."""
    before = _int8.int8_gemm_isa()
    try:
        results = []
        for isa in ("amx", "avx512_vnni"):
            _int8.set_int8_gemm_isa(isa)
            results.append(np.asarray(sketchcore.int8_sketched_matmul(x, S, U, **kwargs)))
        return results
    finally:
        _int8.set_int8_gemm_isa(before)


@needs_amx
@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 70), d_in=st.integers(1, 300), rank=st.integers(1, 200), d_out=st.integers(1, 200),
       activation=st.sampled_from(["none", "relu", "gelu"]), inner=st.sampled_from([None, "relu"]),
       seed=st.integers(0, 2**32 - 1))
def test_amx_equals_avx512_vnni_bit_for_bit(rows, d_in, rank, d_out, activation, inner, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, d_in)).astype(np.float32)
    S, U = factor(rng, d_in, rank), factor(rng, rank, d_out)
    bias = rng.standard_normal(d_out).astype(np.float32)
    amx, vnni = both_families(x, S, U, bias=bias, activation=activation, inner_activation=inner)
    np.testing.assert_array_equal(amx, vnni)


@needs_amx
@pytest.mark.parametrize("rows", [8, 16, 17, 32, 47, 64, 65, 130])
@pytest.mark.parametrize("d_in", [64, 1024, 1061])  # one tile row; many inner blocks; blocks plus a tail
def test_amx_tiles_blocks_and_tails_match_the_reference(rng, rows, d_in):
    x = rng.standard_normal((rows, d_in)).astype(np.float32)
    S, U = factor(rng, d_in, 96), factor(rng, 96, 150)
    amx, vnni = both_families(x, S, U)
    np.testing.assert_array_equal(amx, vnni)
    ref = quantized_reference(x, S, U, None, "none", "none")
    np.testing.assert_allclose(amx, ref, rtol=2e-6, atol=1e-5 * np.abs(ref).max())


@needs_amx
@pytest.mark.parametrize("threads", [1, 2])
def test_concurrent_calls_of_different_row_counts_keep_their_tile_configurations(rng, threads):
    # Each worker loads the tile configuration its rows need and releases it after its tiles, so
    # calls of different shapes on many threads at once cannot run with another's configuration.
    S, U = factor(rng, 200, 64), factor(rng, 64, 130)
    xs = [rng.standard_normal((rows, 200)).astype(np.float32) for rows in (17, 40, 70, 33, 8, 129, 16, 50)]
    before_threads, before_isa = sketchcore.get_num_threads(), _int8.int8_gemm_isa()
    sketchcore.set_num_threads(threads)
    try:
        _int8.set_int8_gemm_isa("avx512_vnni")
        expected = [np.asarray(sketchcore.int8_sketched_matmul(x, S, U)) for x in xs]
        _int8.set_int8_gemm_isa("amx")
        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(lambda x: np.asarray(sketchcore.int8_sketched_matmul(x, S, U)), xs * 3))
    finally:
        sketchcore.set_num_threads(before_threads)
        _int8.set_int8_gemm_isa(before_isa)
    for i, y in enumerate(got):
        np.testing.assert_array_equal(y, expected[i % len(xs)])


@needs_amx
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("rows,d_in", [(450, 4108), (700, 4100), (129, 4096)])
def test_amx_row_bands_and_whole_inner_dimension_match_avx512_vnni(rng, threads, rows, d_in):
    # A first factor over 1 MiB packed: the AMX tiles walk bands of 192 rows (the last one
    # shorter; one band at 129 rows) panel by panel, each 32 × 32 block of sums over every group
    # at once, plus a tail of groups past the last multiple of 16 (4108, 4100).
    x = rng.standard_normal((rows, d_in)).astype(np.float32)
    S, U = factor(rng, d_in, 300), factor(rng, 300, 69)
    assert S.nbytes > 1 << 20
    bias = rng.standard_normal(69).astype(np.float32)
    before = sketchcore.get_num_threads()
    sketchcore.set_num_threads(threads)
    try:
        amx, vnni = both_families(x, S, U, bias=bias, activation="gelu")
    finally:
        sketchcore.set_num_threads(before)
    np.testing.assert_array_equal(amx, vnni)
    ref = quantized_reference(x, S, U, bias, "gelu", "none")
    np.testing.assert_allclose(amx, ref, rtol=2e-6, atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize("rows,k,n", [(1, 5, 3), (37, 300, 70), (300, 1040, 130)])
def test_gemm_bench_hook_times_one_dequantized_product(rng, rows, k, n):
    x = rng.standard_normal((rows, k)).astype(np.float32)
    S = factor(rng, k, n)
    out, seconds = _int8._gemm_for_bench(x, S, 3)
    assert out.shape == (rows, n) and out.dtype == np.float32
    assert len(seconds) == 3 and all(s > 0 for s in seconds)
    qx, sx = q8_rows(x)
    ref = dequantized(qx @ S.q.astype(np.int64), sx, S.scale)
    np.testing.assert_allclose(out, ref, rtol=2e-6, atol=1e-6 * np.abs(ref).max())
    if HAS_AMX:
        before = _int8.int8_gemm_isa()
        try:
            _int8.set_int8_gemm_isa("avx512_vnni")
            vnni, _ = _int8._gemm_for_bench(x, S, 1)
            _int8.set_int8_gemm_isa("amx")
            amx, _ = _int8._gemm_for_bench(x, S, 1)
        finally:
            _int8.set_int8_gemm_isa(before)
        np.testing.assert_array_equal(amx, vnni)


def test_gemm_bench_hook_rejects_bad_arguments(rng):
    S = factor(rng, 8, 4)
    with pytest.raises(ValueError, match=r"_gemm_for_bench: x: expected shape \(rows, 8\), got \(3, 7\)"):
        _int8._gemm_for_bench(np.zeros((3, 7), np.float32), S, 1)
    with pytest.raises(ValueError, match=r"_gemm_for_bench: x: expected shape \(rows, 8\), got \(8,\)"):
        _int8._gemm_for_bench(np.zeros(8, np.float32), S, 1)
    with pytest.raises(ValueError, match=r"int8_gemm_seconds_for_bench: repeats: expected repeats >= 1, got 0"):
        _int8._gemm_for_bench(np.zeros((3, 8), np.float32), S, 0)


@needs_amx
def test_amx_is_the_default_and_selectable_by_name_and_environment():
    assert _int8.int8_gemm_isa() == "amx" or "SKETCHCORE_INT8_ISA" in os.environ
    code = "from sketchcore import _int8; print(_int8.int8_gemm_isa())"
    for cap, expected in (("amx", "amx"), ("avx512_vnni", "avx512_vnni")):
        env = dict(os.environ, SKETCHCORE_INT8_ISA=cap)
        chosen = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert chosen.stdout.strip().splitlines()[-1] == expected
    assert _int8.int8_peak_macs_per_second("amx", 1000) > 0


def test_unknown_family_names_list_amx():
    with pytest.raises(ValueError, match=r"set_int8_gemm_isa: name: expected one of 'amx', 'avx512_vnni'.*got 'amx2'"):
        _int8.set_int8_gemm_isa("amx2")


# A seccomp filter that fails arch_prctl(ARCH_REQ_XCOMP_PERM = 0x1023, …) with EPERM and allows
# every other system call: a process as Linux treats one it refuses the tile state.
_REFUSE_TILES = """
import ctypes, struct
def op(code, k, jt=0, jf=0):
    return struct.pack("HBBI", code, jt, jf, k)
program = b"".join([
    op(0x20, 0),                     # A = syscall number
    op(0x15, 158, 0, 3),             # arch_prctl? else allow
    op(0x20, 16),                    # A = low word of its first argument
    op(0x15, 0x1023, 0, 1),          # ARCH_REQ_XCOMP_PERM? else allow
    op(0x06, 0x00050000 | 1),        # fail with EPERM
    op(0x06, 0x7FFF0000),            # allow
])
buffer = ctypes.create_string_buffer(program)
class Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
prog = Prog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(38, 1, 0, 0, 0) == 0                      # PR_SET_NO_NEW_PRIVS
assert libc.prctl(22, 2, ctypes.byref(prog), 0, 0) == 0     # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
import numpy as np, sketchcore
from sketchcore import _int8
rng = np.random.default_rng(0)
S = sketchcore.Int8Factor(*sketchcore.quantize_int8(rng.standard_normal((128, 64)).astype(np.float32)))
U = sketchcore.Int8Factor(*sketchcore.quantize_int8(rng.standard_normal((64, 96)).astype(np.float32)))
x = rng.standard_normal((40, 128)).astype(np.float32)
y = sketchcore.int8_sketched_matmul(x, S, U)
try:
    _int8.set_int8_gemm_isa("amx")
    refused = "no"
except ValueError as e:
    refused = str(e)
print(_int8.int8_gemm_isa(), _int8.int8_gemm_isa_supported("amx"), repr(refused))
np.save("{out}", y)
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.machine() != "x86_64",
                    reason="the tile-state permission is a Linux x86-64 system call")
@pytest.mark.skipif(not _int8.int8_gemm_isa_supported("avx512_vnni"), reason="the fallback is the AVX-512 VNNI family")
def test_a_process_refused_the_tile_state_falls_back_to_avx512_vnni(rng, tmp_path):
    out = tmp_path / "y.npy"
    env = {k: v for k, v in os.environ.items() if k != "SKETCHCORE_INT8_ISA"}
    env["SKETCHCORE_INT8_ISA"] = "amx"  # asks for AMX: still the fallback
    run = subprocess.run([sys.executable, "-c", _REFUSE_TILES.replace("{out}", str(out))], env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    isa, supported, refused = run.stdout.strip().splitlines()[-1].split(" ", 2)
    assert (isa, supported) == ("avx512_vnni", "False")
    assert "set_int8_gemm_isa: name: expected a family this CPU runs, got 'amx' (not supported here)" in refused
    r = np.random.default_rng(0)
    S = sketchcore.Int8Factor(*sketchcore.quantize_int8(r.standard_normal((128, 64)).astype(np.float32)))
    U = sketchcore.Int8Factor(*sketchcore.quantize_int8(r.standard_normal((64, 96)).astype(np.float32)))
    x = r.standard_normal((40, 128)).astype(np.float32)
    np.testing.assert_allclose(np.load(out), quantized_reference(x, S, U, None, "none", "none"), rtol=2e-6, atol=1e-5)

