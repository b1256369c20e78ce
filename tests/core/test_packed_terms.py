"""A 3-D S (T, d_in, k) that BLAS cannot read as one matrix is packed into Sp = [S_1 … S_T]
on every call (detail::pack_terms): each row of each term is a segment of k elements, copied
in 64-byte blocks and then a tail of halving blocks. These cases cover every element size
(float64, float32, and the 16-bit S of the native bfloat16 GEMM), segment lengths that fill
whole blocks and each tail block, strided columns and padded rows, in the forward and in the
backward (which packs Sp too), against float64 references."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sketchcore
from _reference import assert_close, reference

LAYOUTS = ("contiguous", "strided_columns", "padded_rows")


def laid_out(S, layout):
    """S's values in the given memory layout (none of them one matrix Sp in place when T > 1)."""
    if layout == "strided_columns":
        wide = np.zeros(S.shape[:-1] + (2 * S.shape[-1],), S.dtype)
        wide[..., ::2] = S
        return wide[..., ::2]
    if layout == "padded_rows":
        wide = np.zeros(S.shape[:-1] + (S.shape[-1] + 3,), S.dtype)
        wide[..., :S.shape[-1]] = S
        return wide[..., :S.shape[-1]]
    return S


def gradients64(g, x, S, U):
    g, x, S, U = (a.astype(np.float64) for a in (g, x, S, U))
    gu = [g @ U[t].T for t in range(S.shape[0])]
    return sum(gu[t] @ S[t].T for t in range(S.shape[0])), np.stack([x.T @ gu[t] for t in range(S.shape[0])])


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 24), d_in=st.integers(1, 40), k=st.integers(1, 70), d_out=st.integers(1, 12),
       terms=st.integers(2, 4), double=st.booleans(), layout=st.sampled_from(LAYOUTS), seed=st.integers(0, 2**32 - 1))
def test_packed_3d_sketch_forward_and_backward_match_float64(rows, d_in, k, d_out, terms, double, layout, seed):
    rng = np.random.default_rng(seed)
    dtype = np.float64 if double else np.float32
    x = rng.standard_normal((rows, d_in)).astype(dtype)
    S = laid_out((rng.standard_normal((terms, d_in, k)) / np.sqrt(d_in)).astype(dtype), layout)
    U = (rng.standard_normal((terms, k, d_out)) / np.sqrt(k)).astype(dtype)
    z = np.empty((rows, terms * k), dtype)
    y = sketchcore.sketched_matmul(x, S, U, intermediate=z)
    # Each result against float64, relative to the same sum of absolute values (the scale of
    # its rounding error: hypothesis found outputs that cancel to 1e-3 of their terms).
    absolute = [np.abs(a) for a in (x, S, U)]
    assert_close(y, reference(x, S, U), dtype, magnitude=reference(*absolute))
    Sp = np.concatenate(list(S.astype(np.float64)), axis=1)  # [S_1 … S_T]
    assert_close(z, x.astype(np.float64) @ Sp, dtype, magnitude=absolute[0] @ np.abs(Sp))
    g = rng.standard_normal((rows, d_out)).astype(dtype)
    dx, dS, _, _ = sketchcore.sketched_matmul_backward(g, x, S, U, z)
    dx64, dS64 = gradients64(g, x, S, U)
    dx_abs, dS_abs = gradients64(np.abs(g), *absolute)
    assert_close(dx, dx64, dtype, magnitude=dx_abs)
    assert_close(dS, dS64, dtype, magnitude=dS_abs)


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 24), d_in=st.integers(1, 40), k=st.integers(1, 70), d_out=st.integers(1, 12),
       terms=st.integers(2, 4), layout=st.sampled_from(LAYOUTS), seed=st.integers(0, 2**32 - 1))
def test_packed_3d_bfloat16_sketch_matches_float64(rows, d_in, k, d_out, terms, layout, seed):
    """bfloat16 S is packed as 16-bit elements where the native GEMM runs (else widened first)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    bf16 = lambda a: torch.from_numpy(np.ascontiguousarray(a, np.float32)).bfloat16()  # noqa: E731
    x = bf16(rng.standard_normal((rows, d_in)))
    S = bf16(rng.standard_normal((terms, d_in, k)) / np.sqrt(d_in))
    if layout == "strided_columns":
        S = torch.zeros(terms, d_in, 2 * k, dtype=torch.bfloat16).index_copy_(2, torch.arange(0, 2 * k, 2), S)[..., ::2]
    elif layout == "padded_rows":
        S = torch.nn.functional.pad(S, (0, 3))[..., :k]
    U = bf16(rng.standard_normal((terms, k, d_out)) / np.sqrt(k))
    as64 = lambda t: t.double().numpy()  # noqa: E731
    y = sketchcore.sketched_matmul(x, S, U)
    ref = reference(as64(x), as64(S), as64(U))
    magnitude = reference(*(np.abs(as64(t)) for t in (x, S, U)))
    # y rounded once to bfloat16 (2^-8 relative per element) from a float32 sum (its error
    # relative to the sum of absolute values).
    assert np.linalg.norm(as64(y) - ref) <= 1e-2 * np.linalg.norm(ref) + 1e-5 * np.linalg.norm(magnitude)
    g = bf16(rng.standard_normal((rows, d_out)))
    z = torch.empty(rows, terms * k, dtype=torch.bfloat16)
    sketchcore.sketched_matmul(x, S, U, intermediate=z)
    dx = sketchcore.sketched_matmul_backward(g, x, S, U, z)[0]
    dx64, _ = gradients64(as64(g), as64(x), as64(S), as64(U))
    dx_abs, _ = gradients64(*(np.abs(as64(t)) for t in (g, x, S, U)))
    assert np.linalg.norm(as64(dx) - dx64) <= 1e-2 * np.linalg.norm(dx64) + 1e-5 * np.linalg.norm(dx_abs)
