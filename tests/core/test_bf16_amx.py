"""The AMX-BF16 kernel of the native bfloat16 GEMM (``build_info()["cpu_bf16_amx"]``: TDPBF16PS
tiles, where the CPU has AMX-BF16 and Linux grants the tile state): bfloat16 problems whose
shapes straddle its tiles (16 rows, 16 columns, 32 inner indices), its 32 × 32 blocks and its
512-index slabs must still be the float32 computation on the bfloat16 values, rounded once
(checked against float64), and must agree with the VDPBF16PS kernel of the same build
(``SKETCHCORE_BF16_AMX=0``, in a child process) to one bfloat16 rounding. Where the CPU has no
AMX-BF16 the child-process comparisons skip, saying so; the float64 checks hold on any path."""
import os
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sketchcore

torch = pytest.importorskip("torch")
ROUNDING = 2.0 ** -8  # one bfloat16 rounding of the result (half an ulp is 2^-9), with room


def cpu_has_amx_bf16():
    if not os.path.exists("/proc/cpuinfo"):
        return False
    with open("/proc/cpuinfo") as f:
        flags = f.read()
    return " amx_bf16" in flags and " amx_tile" in flags and " avx512_bf16" in flags


needs_amx = pytest.mark.skipif(not cpu_has_amx_bf16(), reason="this CPU has no AMX-BF16 (Linux lists no amx_bf16)")


def bf16(generator, *shape, scale=1.0):
    return (torch.randn(*shape, generator=generator, dtype=torch.float64) * scale).to(torch.bfloat16)


def assert_close(got, want, magnitude, inner, what):
    """|got − want| ≤ one bfloat16 rounding of want + a float32 sum's error over `inner` terms
    whose absolute values sum to `magnitude`, elementwise."""
    bound = ROUNDING * want.abs() + 2 * (inner + 2) * 2.0 ** -24 * magnitude + 1e-30
    gap = (got.double() - want).abs()
    assert bool(torch.all(gap <= bound)), f"{what}: worst gap {float((gap / bound).max()):.3g} of its bound"


# Extents on both sides of the tiles' (16, 32) and the slab's (512) edges.
edges = st.sampled_from([1, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 97])


@settings(max_examples=40, deadline=None)
@given(rows=edges, d_in=st.one_of(edges, st.integers(500, 530)), r=edges, d_out=edges,
       layout=st.sampled_from(["row-major", "column-major", "strided"]), scale=st.sampled_from([1.0, 0.75, -3.0]),
       silu=st.booleans(), seed=st.integers(0, 2**31))
def test_forward_at_tile_edges_is_the_float32_computation_rounded_once(rows, d_in, r, d_out, layout, scale, silu,
                                                                       seed):
    """X·Sp runs in the native GEMM (on AMX tiles where the CPU has them), and so does σ(Z)·Up for
    r ≥ 64 (σ(Z) split into bfloat16 hi + lo): Z and y against float64, x row-major (read in
    place), column-major (copied per task) or with a wider row stride, σ = SiLU or none."""
    gen = torch.Generator().manual_seed(seed)
    x = bf16(gen, rows, d_in)
    if layout == "column-major":
        x = x.t().contiguous().t()
    elif layout == "strided":
        x = bf16(gen, rows, d_in + 5)[:, :d_in]
    S, U = bf16(gen, d_in, r, scale=d_in ** -0.5), bf16(gen, r, d_out, scale=r ** -0.5)
    z = torch.empty(rows, r, dtype=torch.bfloat16)
    y = sketchcore.sketched_matmul(x, S, U, scale=scale, intermediate=z, inner_activation="silu" if silu else "none")
    x64, S64, U64 = x.double(), S.double(), U.double()
    z_want, z_mag = x64 @ S64, x64.abs() @ S64.abs()
    assert_close(z, z_want, z_mag, d_in, "Z")
    # SiLU is 1-Lipschitz up to 1.1 and within 4 ulp of float64: a = σ(Z) within 1.1·Z's error + 2⁻²¹·|a|
    a, a_mag = (z_want * torch.sigmoid(z_want), 1.1 * z_mag) if silu else (z_want, z_mag)
    assert_close(y, scale * a @ U64, abs(scale) * a_mag @ U64.abs(), d_in + r + 4, "y")


@settings(max_examples=20, deadline=None)
@given(rows=st.one_of(edges, st.integers(500, 530)), d_out=edges, r=edges, silu=st.booleans(),
       seed=st.integers(0, 2**31))
def test_backward_at_tile_edges_is_the_float32_computation_rounded_once(rows, d_out, r, silu, seed):
    """Zᵀ·dL/dy (Zᵀ copied per task, the inner index over rows) and dL/dy·Upᵀ in the native GEMM;
    with an inner SiLU only dL/dy·Upᵀ (then times σ′(Z)) is native, the rest float32."""
    gen = torch.Generator().manual_seed(seed)
    d_in = 40
    x, S, U = bf16(gen, rows, d_in), bf16(gen, d_in, r, scale=d_in ** -0.5), bf16(gen, r, d_out, scale=r ** -0.5)
    z = torch.empty(rows, r, dtype=torch.bfloat16)
    inner = "silu" if silu else "none"
    sketchcore.sketched_matmul(x, S, U, intermediate=z, inner_activation=inner)
    g = bf16(gen, rows, d_out)
    dx, dS, dU, _ = sketchcore.sketched_matmul_backward(g, x, S, U, z, scale=0.5, inner_activation=inner)
    x64, g64, z64, S64, U64 = x.double(), g.double(), z.double(), S.double(), U.double()
    a, slope = (z64 * torch.sigmoid(z64), torch.sigmoid(z64) * (1 + z64 * (1 - torch.sigmoid(z64)))) if silu else (
        z64, torch.ones_like(z64))
    # σ and σ′ in float32 (within a few ulp): bounds with |σ′| ≤ 1.1 and room for those ulp
    d, d_abs = (g64 @ U64.T) * slope, 1.1 * (g64.abs() @ U64.abs().T)
    assert_close(dx, 0.5 * d @ S64.T, 0.5 * d_abs @ S64.abs().T, d_out + r + 8, "dx")
    assert_close(dS, 0.5 * x64.T @ d, 0.5 * x64.abs().T @ d_abs, rows + d_out + 8, "dS")
    assert_close(dU, 0.5 * a.T @ g64, 0.5 * a.abs().T @ g64.abs(), rows + 8, "dU")


CHILD = textwrap.dedent("""
    import sys, torch, sketchcore
    gen = torch.Generator().manual_seed(9)
    # 97 rows (not a multiple of 32), d_in 600 (two slabs, the second of 88 indices: not a
    # multiple of 32), r 80 (Z·Up split on the tiles), d_out 1041 (more than one 1024-column slab)
    x = torch.randn(97, 600, generator=gen).bfloat16()
    S = (torch.randn(600, 80, generator=gen) / 25).bfloat16()
    U = (torch.randn(80, 1041, generator=gen) / 9).bfloat16()
    z = torch.empty(97, 80, dtype=torch.bfloat16)
    y = sketchcore.sketched_matmul(x, S, U, intermediate=z, scale=0.75)
    y_silu = sketchcore.sketched_matmul(x, S, U, inner_activation="silu")
    g = torch.randn(97, 1041, generator=gen).bfloat16()
    grads = sketchcore.sketched_matmul_backward(g, x, S, U, z, scale=0.75)
    torch.save({"amx": sketchcore.build_info()["cpu_bf16_amx"], "y": y, "y_silu": y_silu, "z": z, "grads": grads}, sys.argv[1])
""")


def run_child(path, amx):
    env = {k: v for k, v in os.environ.items() if k not in ("SKETCHCORE_BF16_AMX", "SKETCHCORE_BF16_GEMM")}
    if not amx:
        env["SKETCHCORE_BF16_AMX"] = "0"
    subprocess.run([sys.executable, "-c", CHILD, str(path)], env=env, check=True, timeout=300)
    return torch.load(path)


@needs_amx
def test_amx_and_vdpbf16ps_kernels_agree_to_one_rounding(tmp_path):
    amx = run_child(tmp_path / "amx.pt", amx=True)
    vdp = run_child(tmp_path / "vdp.pt", amx=False)
    # the switch: SKETCHCORE_BF16_AMX=0 keeps VDPBF16PS, its absence runs AMX on this CPU
    assert amx["amx"] is True and vdp["amx"] is False
    pairs = [("y", amx["y"], vdp["y"]), ("z", amx["z"], vdp["z"]), ("y_silu", amx["y_silu"], vdp["y_silu"])]
    pairs += [(name, a, b) for name, a, b in zip(("dx", "dS", "dU"), amx["grads"], vdp["grads"])]
    for name, a, b in pairs:
        # both float32 sums rounded once: at most one bfloat16 step apart (float32 noise near 0)
        gap = (a.double() - b.double()).abs()
        step = b.double().abs() * 2.0 ** -7 + 1e-3 * float(b.double().abs().max())
        assert bool(torch.all(gap <= step)), (name, float((gap / step).max()))
        assert float((a != b).double().mean()) < 0.05, (name, "too many elements differ")


@needs_amx
def test_this_process_runs_amx_unless_switched_off():
    wanted = os.environ.get("SKETCHCORE_BF16_AMX") != "0" and os.environ.get("SKETCHCORE_BF16_GEMM") != "0"
    assert sketchcore.build_info()["cpu_bf16_amx"] is wanted


def test_amx_flushes_subnormal_products_like_vdpbf16ps():
    """x = 2⁻⁷⁰ times S = 2⁻⁶⁰ is 2⁻¹³⁰, a float32 subnormal: 0 on either native kernel; the sum of
    40 such products reaches Z unflushed (40 · 2⁻¹³⁰) only on the widening path."""
    x = torch.full((33, 40), 2.0 ** -70).bfloat16()
    S, U = torch.full((40, 17), 2.0 ** -60).bfloat16(), torch.ones(17, 5).bfloat16()
    z = torch.empty(33, 17, dtype=torch.bfloat16)
    sketchcore.sketched_matmul(x, S, U, intermediate=z)
    expected = 0.0 if sketchcore.build_info()["cpu_bf16_gemm"] else float(torch.tensor(40 * 2.0 ** -130).bfloat16())
    assert torch.equal(z.double(), torch.full((33, 17), expected, dtype=torch.float64))
