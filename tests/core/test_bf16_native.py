"""bfloat16 problems on a CPU with the native bfloat16 GEMM (AVX512_BF16; ``build_info()
["cpu_bf16_gemm"]``): the products whose operands are bfloat16 values (X·Sp in the forward;
Zᵀ·dL/dy, dL/dy·Upᵀ and the bias sums in a backward without activation or dropout) take them as
they are. Each result must still be the float32 computation on the bfloat16 values, rounded once:
checked against float64 on fresh shapes (hypothesis), and against the widening path of the same
build (``SKETCHCORE_BF16_GEMM=0``, in a child process). Where the CPU lacks AVX512_BF16 the same
assertions hold for the widening path."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sketchcore

torch = pytest.importorskip("torch")
ROUNDING = 2.0 ** -8  # a bfloat16 rounding (half an ulp is 2^-9 of the value), with room


def bf16(generator, *shape, scale=1.0):
    return (torch.randn(*shape, generator=generator, dtype=torch.float64) * scale).to(torch.bfloat16)


def assert_close(got, want, magnitude, inner, what):
    """|got − want| ≤ one bfloat16 rounding of want + float32 sums over `inner` terms of size
    `magnitude` (the same sum over absolute values), elementwise."""
    bound = ROUNDING * want.abs() + 2 * (inner + 2) * 2.0 ** -24 * magnitude + 1e-30
    gap = (got.double() - want).abs()
    assert bool(torch.all(gap <= bound)), f"{what}: worst gap {float((gap / bound).max()):.3g} of its bound"


problems = st.fixed_dictionaries({
    "rows": st.integers(1, 300), "d_in": st.integers(1, 90), "terms": st.integers(1, 3), "k": st.integers(1, 9),
    "d_out": st.integers(1, 80), "column_major_x": st.booleans(), "three_d": st.booleans(), "seed": st.integers(0, 2**31),
    # a 2-D U stored column by column (Upᵀ then reaches the GEMM as row pairs), dL/dy with a row
    # stride wider than its columns
    "column_major_U": st.booleans(), "strided_dy": st.booleans(),
})


def make(p):
    gen = torch.Generator().manual_seed(p["seed"])
    x = bf16(gen, p["rows"], p["d_in"])
    if p["column_major_x"]:  # a BLAS operand in place, transposed: the native GEMM reads it so
        x = x.t().contiguous().t()
    S = bf16(gen, p["terms"], p["d_in"], p["k"], scale=p["d_in"] ** -0.5)
    U = bf16(gen, p["terms"], p["k"], p["d_out"], scale=p["k"] ** -0.5)
    if not p["three_d"] or p["terms"] == 1:
        S, U = S[0], U[0]
        if p.get("column_major_U"):
            U = U.t().contiguous().t()
    return gen, x, S, U


def packed(S, U):
    """Sp (d_in × r) and Up (r × d_out) in float64."""
    if S.dim() == 2:
        return S.double(), U.double()
    return torch.cat(list(S.double()), dim=1), torch.cat(list(U.double()), dim=0)


def forward(p, bias=None):
    """A fresh problem and its bfloat16 forward with the intermediate kept: (generator, x, S, U, Sp,
    Up, z, y, bias); bias="draw" draws a bfloat16 bias from the generator."""
    gen, x, S, U = make(p)
    Sp, Up = packed(S, U)
    z = torch.empty(p["rows"], Sp.shape[1], dtype=torch.bfloat16)
    if bias == "draw":
        bias = bf16(gen, p["d_out"])
    y = sketchcore.sketched_matmul(x, S, U, bias=bias, scale=0.5, intermediate=z)
    return gen, x, S, U, Sp, Up, z, y, bias


@settings(max_examples=40, deadline=None)
@given(problems)
def test_forward_is_the_float32_computation_rounded_once(p):
    _, x, S, U, Sp, Up, z, y, _ = forward(p)
    r = Sp.shape[1]
    assert y.dtype == torch.bfloat16 and z.dtype == torch.bfloat16
    x64 = x.double()
    assert_close(z, x64 @ Sp, x64.abs() @ Sp.abs(), p["d_in"], "Z")
    assert_close(y, 0.5 * (x64 @ Sp) @ Up, 0.5 * (x64.abs() @ Sp.abs()) @ Up.abs(), p["d_in"] + r, "y")


@settings(max_examples=40, deadline=None)
@given(problems)
def test_backward_without_activation_is_the_float32_computation_rounded_once(p):
    gen, x, S, U, Sp, Up, z, _, bias = forward(p, bias="draw")
    r = Sp.shape[1]
    g = bf16(gen, p["rows"], p["d_out"] + 3)[:, :p["d_out"]] if p["strided_dy"] else bf16(gen, p["rows"], p["d_out"])
    dx, dS, dU, dbias = sketchcore.sketched_matmul_backward(g, x, S, U, z, bias=bias, scale=0.5)
    x64, g64, z64 = x.double(), g.double(), z.double()
    gu, gu_abs = g64 @ Up.T, g64.abs() @ Up.abs().T
    assert_close(dx, 0.5 * gu @ Sp.T, 0.5 * gu_abs @ Sp.abs().T, p["d_out"] + r, "dx")
    dSp_want, dUp_want = 0.5 * x64.T @ gu, 0.5 * z64.T @ g64
    dSp_mag, dUp_mag = 0.5 * x64.abs().T @ gu_abs, 0.5 * z64.abs().T @ g64.abs()
    dSp_got, dUp_got = packed(dS, dU)
    assert_close(dSp_got, dSp_want, dSp_mag, p["rows"] + p["d_out"], "dS")
    assert_close(dUp_got, dUp_want, dUp_mag, p["rows"], "dU")
    assert_close(dbias, g64.sum(0), g64.abs().sum(0), p["rows"], "dbias")
    assert all(t.dtype == torch.bfloat16 for t in (dx, dS, dU, dbias))


@settings(max_examples=10, deadline=None)
@given(terms=st.integers(1, 4), data=st.data(), with_dx=st.booleans(), seed=st.integers(0, 2**31))
def test_term_ranges_of_the_native_backward_are_slices_of_the_full_gradients(terms, data, with_dx, seed):
    """S_terms / U_terms select columns of Z and of G·Upᵀ inside the native products: each part is
    the full gradient's slice (within one bfloat16 step: the float32 GEMM after G·Upᵀ may sum a
    narrower matrix in another order)."""
    s_begin = data.draw(st.integers(0, terms))
    s_end = data.draw(st.integers(s_begin, terms))
    u_begin = data.draw(st.integers(0, terms))
    u_end = data.draw(st.integers(u_begin, terms))
    # 1100 rows × 1030 columns of dL/dy: more than one chunk of the backward, and more than one
    # 512-index slab of the native products over rows
    p = {"rows": 1100, "d_in": 33, "terms": terms, "k": 5, "d_out": 1030, "column_major_x": False, "three_d": True,
         "seed": seed}
    gen, x, S, U, _, _, z, _, bias = forward(p, bias="draw")
    if S.dim() == 2:
        S, U = S[None], U[None]
    g = bf16(gen, 1100, 1030)
    full = sketchcore.sketched_matmul_backward(g, x, S, U, z, bias=bias)
    needs = ("x", "S", "U") if with_dx else ("S", "U")
    part = sketchcore.sketched_matmul_backward(g, x, S, U, z, bias=bias, needs=needs, S_terms=(s_begin, s_end),
                                               U_terms=(u_begin, u_end))
    pairs = [(part[1], full[1][s_begin:s_end]), (part[2], full[2][u_begin:u_end])]
    if with_dx:
        pairs.append((part[0], full[0]))
    for got, want in pairs:
        assert got.shape == want.shape
        # one bfloat16 step, or float32 noise where the sum cancels (the widening path's BLAS may
        # sum a narrower matrix in another order)
        step = want.double().abs() * 2.0 ** -7 + 1e-4 * float(want.double().abs().amax()) if want.numel() else 0
        assert bool(torch.all((got.double() - want.double()).abs() <= step))


CHILD = textwrap.dedent("""
    import sys, torch, sketchcore
    gen = torch.Generator().manual_seed(8)
    # 1100 rows: the backward takes more than one chunk; d_in 600 > one packed slab of 512
    x = torch.randn(1100, 600, generator=gen).bfloat16()
    S = (torch.randn(2, 600, 24, generator=gen) / 25).bfloat16()
    U = (torch.randn(2, 24, 1030, generator=gen) / 7).bfloat16()
    b = torch.randn(1030, generator=gen).bfloat16()
    z = torch.empty(1100, 48, dtype=torch.bfloat16)
    y = sketchcore.sketched_matmul(x, S, U, bias=b, intermediate=z)
    g = torch.randn(1100, 1030, generator=gen).bfloat16()
    grads = sketchcore.sketched_matmul_backward(g, x, S, U, z, bias=b)
    torch.save({"native": sketchcore.build_info()["cpu_bf16_gemm"], "y": y, "z": z, "grads": grads,
                "inputs": (x, S, U, b, g)}, sys.argv[1])
""")


def run_child(path, disable):
    env = dict(os.environ)
    env.pop("SKETCHCORE_BF16_GEMM", None)
    if disable:
        env["SKETCHCORE_BF16_GEMM"] = "0"
    subprocess.run([sys.executable, "-c", CHILD, str(path)], env=env, check=True, timeout=300)
    return torch.load(path)


def test_native_and_widening_paths_agree_to_one_rounding(tmp_path):
    native = run_child(tmp_path / "native.pt", disable=False)
    widened = run_child(tmp_path / "widened.pt", disable=True)
    assert widened["native"] is False
    if os.environ.get("SKETCHCORE_BF16_GEMM") != "0":  # this process sees what the child saw
        assert native["native"] == sketchcore.build_info()["cpu_bf16_gemm"]
    pairs = [("y", native["y"], widened["y"]), ("z", native["z"], widened["z"])]
    pairs += [(name, a, b) for name, a, b in zip(("dx", "dS", "dU", "dbias"), native["grads"], widened["grads"])]
    for name, a, b in pairs:
        # Both are float32 results rounded once: they differ by at most one bfloat16 step where
        # the two summation orders straddle a rounding boundary (or by float32 noise near 0).
        gap = (a.double() - b.double()).abs()
        step = b.double().abs() * 2.0 ** -7 + 1e-3 * float(b.double().abs().max())
        assert bool(torch.all(gap <= step)), (name, float((gap / step).max()))
        assert float((a != b).double().mean()) < 0.05, (name, "too many elements differ")
    # and the native results (several chunks and slabs) against float64, as the hypothesis tests do
    x, S, U, b, g = (t.double() for t in native["inputs"])
    Sp, Up = packed(S, U)
    z64, g_abs = native["z"].double(), g.abs()
    assert_close(native["z"], x @ Sp, x.abs() @ Sp.abs(), 600, "z")
    assert_close(native["y"], (x @ Sp) @ Up + b, (x.abs() @ Sp.abs()) @ Up.abs() + b.abs(), 648, "y")
    dx, dS, dU, dbias = native["grads"]
    gu, gu_abs = g @ Up.T, g_abs @ Up.abs().T
    assert_close(dx, gu @ Sp.T, gu_abs @ Sp.abs().T, 1078, "dx")
    dSp, dUp = packed(dS, dU)
    assert_close(dSp, x.T @ gu, x.abs().T @ gu_abs, 2130, "dS")
    assert_close(dUp, z64.T @ g, z64.abs().T @ g_abs, 1100, "dU")
    assert_close(dbias, g.sum(0), g_abs.sum(0), 1100, "dbias")


def test_the_native_gemm_flushes_subnormal_products_to_zero():
    """VDPBF16PS flushes subnormals: x = 2⁻⁷⁰ times S = 2⁻⁶⁰ is 2⁻¹³⁰, a float32 subnormal, so Z is
    0 on the native path and 4 · 2⁻¹³⁰ (d_in = 4 such products, exact) on the widening path."""
    x = torch.full((3, 4), 2.0 ** -70).bfloat16()
    S, U = torch.full((4, 2), 2.0 ** -60).bfloat16(), torch.ones(2, 5).bfloat16()
    z = torch.empty(3, 2, dtype=torch.bfloat16)
    sketchcore.sketched_matmul(x, S, U, intermediate=z)
    expected = 0.0 if sketchcore.build_info()["cpu_bf16_gemm"] else 4 * 2.0 ** -130
    assert torch.equal(z.double(), torch.full((3, 2), expected, dtype=torch.float64))


@pytest.mark.parametrize("training", [True, False], ids=["training", "eval"])
def test_sklinear_under_cpu_autocast_runs_the_native_gemm(training):
    """Where users put it: an SKLinear inside a model, under torch.autocast("cpu", bfloat16), in
    training (autograd records) and in eval under no_grad (one core call). The native GEMM leaves a fingerprint: it flushes the
    subnormal products x·S = 2⁻⁷⁰ · 2⁻⁶⁰, so Z and y are exactly 0 there, while the widening path
    sums them to 16 · 2⁻¹³⁰ = 2⁻¹²⁶ and y, through U = 2¹⁰⁰, is far from 0."""
    from sketchcore.torch import SKLinear

    layer = SKLinear(16, 8, num_terms=1, low_rank=4, bias=True)
    model = torch.nn.Sequential(torch.nn.Identity(), layer).train(training)
    with torch.no_grad():
        layer.S1s.fill_(2.0 ** -60)  # the left factor [S1s; U2s] (d_in side)
        layer.U2s.fill_(2.0 ** -60)
        layer.U1s.fill_(2.0 ** 100)  # the right factor [U1s; S2s]
        layer.S2s.fill_(2.0 ** 100)
        layer.bias.zero_()
    x = torch.full((5, 16), 2.0 ** -70, requires_grad=training)
    with torch.autocast("cpu", torch.bfloat16), torch.set_grad_enabled(training):  # eval: inference, no graph
        y = model(x)
    assert y.dtype == torch.bfloat16 and y.requires_grad == training
    if sketchcore.build_info()["cpu_bf16_gemm"]:
        assert bool(torch.all(y == 0))
    else:
        assert bool(torch.all(y.float() > 2.0 ** -30))
    if training:  # and the step completes through the native backward
        y.float().sum().backward()
        assert layer.S1s.grad is not None and layer.S1s.grad.dtype == torch.float32
