"""Random valid and invalid calls of the public API, for tests/core/test_fuzz.py.

Run as ``python _fuzz_cases.py SEED COUNT``: it generates COUNT cases from SEED, prints
``CASE i: description`` before each call (so a crash names its input) and one verdict line
after it, then ``DONE``. A verdict is ``ok`` (a valid call that returned the float64
reference's values), ``raised Type: message`` (an invalid call refused cleanly), or ``BAD
...`` (anything else: a valid call that failed or was wrong, an invalid one accepted, an
unexpected exception type, a leaked pool block).
"""
import sys

import numpy as np

import sketchcore
from _reference import activate

CLEAN = (ValueError, TypeError, MemoryError, IndexError)
ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu")
KINDS = ("gaussian", "rademacher", "uniform", "sparse_sign", "countsketch", "srht")

try:
    import torch
except ImportError:  # the huge stride-0 cases need torch's expand
    torch = None


class Case:
    """One call: `run()` returns the result, `check(result)` verifies a valid one."""

    def __init__(self, description, valid, run, check=None):
        self.description, self.valid, self.run, self.check = description, valid, run, check


def _maybe(rng, p):
    return rng.random() < p


def _array(rng, shape, dtype):
    a = rng.standard_normal(shape) if np.dtype(dtype).kind == "f" else rng.integers(-3, 3, shape)
    return a.astype(dtype)


def _layout(rng, a):
    """`a` itself, or a non-contiguous view with the same values."""
    if a.ndim >= 2 and a.size and _maybe(rng, 0.3):
        return np.swapaxes(np.ascontiguousarray(np.swapaxes(a, -1, -2)), -1, -2)
    if a.size and _maybe(rng, 0.2):
        wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype) if a.ndim else None
        if wide is not None:
            wide[..., ::2] = a
            return wide[..., ::2]
    return a


def _reference(x, S, U, bias, activation, scale):
    x64, S64, U64 = (np.asarray(v, np.float64) for v in (x, S, U))
    if S64.ndim == 2:
        S64, U64 = S64[None], U64[None]
    z = np.zeros(x64.shape[:-1] + (U64.shape[-1],))
    for t in range(S64.shape[0]):
        z += (x64 @ S64[t]) @ U64[t]
    z = scale * z + (0 if bias is None else np.asarray(bias, np.float64))
    return activate(z, activation)


def _close(result, expected, dtype):
    tol = {np.dtype(np.float16): 2e-3, np.dtype(np.float32): 1e-4}.get(np.dtype(dtype), 1e-10)
    result = np.asarray(result, np.float64)
    if result.shape != expected.shape:
        return False
    scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
    return bool(np.all(np.abs(result - expected) <= tol * scale * 10))


def matmul_case(rng):
    """sketched_matmul with a mix of valid and broken arguments."""
    valid = True
    notes = []
    dtype = np.float32 if _maybe(rng, 0.5) else np.float64
    if _maybe(rng, 0.1):
        dtype = rng.choice([np.float16, np.int32, np.complex64])
        valid = np.dtype(dtype) == np.float16  # computed in float32, rounded to float16
        notes.append(f"dtype {np.dtype(dtype)}")
    lead = tuple(int(v) for v in rng.integers(0, 4, rng.integers(0, 3)))
    d_in, k, d_out, T = (int(v) for v in (rng.integers(0, 7), rng.integers(0, 4), rng.integers(0, 6),
                                          rng.integers(1, 4)))
    three_d = _maybe(rng, 0.6)
    x = _array(rng, lead + (d_in,), dtype)
    S = _array(rng, ((T,) if three_d else ()) + (d_in, k), dtype)
    U = _array(rng, ((T,) if three_d else ()) + (k, d_out), dtype)
    if _maybe(rng, 0.08):
        S = _array(rng, S.shape[:-2] + (d_in + 1, k), dtype)
        valid = False
        notes.append("d_in mismatch")
    if _maybe(rng, 0.05):
        U = _array(rng, (T + 1, k, d_out), dtype)
        valid = False
        notes.append("T mismatch or 3-D U")
    if _maybe(rng, 0.03):
        S = _array(rng, (d_in,), dtype)
        valid = False
        notes.append("1-D S")
    kwargs = {}
    bias = None
    if _maybe(rng, 0.4):
        n = d_out + (1 if _maybe(rng, 0.1) else 0)
        valid &= n == d_out
        bias = _array(rng, (n,), dtype)
        kwargs["bias"] = bias
    activation = str(rng.choice(ACTIVATIONS))
    if _maybe(rng, 0.05):
        activation, valid = rng.choice(["tanh", "RELU", ""]), False
    if _maybe(rng, 0.02):
        activation, valid = 3, False
    kwargs["activation"] = activation
    scale = float(rng.choice([1.0, 0.5, -2.0]))
    if _maybe(rng, 0.06):
        scale, valid = rng.choice([float("nan"), float("inf"), 10**400, "2"]), False
    kwargs["scale"] = scale
    if _maybe(rng, 0.05):
        kwargs["dropout_p"], valid = float(rng.choice([-0.5, 1.5, float("nan")])), False
    if _maybe(rng, 0.04):
        kwargs["seed"], valid = int(rng.choice([-1, 2**64])), False
    if _maybe(rng, 0.3):
        out_shape = lead + (d_out,)
        if _maybe(rng, 0.1):
            out_shape, valid = lead + (d_out + 1,), False
        out = np.empty(out_shape, dtype)
        if _maybe(rng, 0.05):
            out.flags.writeable = False
            valid = False
            notes.append("read-only out")
        kwargs["out"] = out
    x, S, U = (_layout(rng, v) for v in (x, S, U))
    description = (f"sketched_matmul(x{x.shape} {np.dtype(dtype)}, S{S.shape}, U{U.shape}, "
                   f"{ {k: (v.shape if hasattr(v, 'shape') else v) for k, v in kwargs.items()} }) {notes}")

    def check(y):
        expected = _reference(x, S, U, bias, activation, scale)
        return _close(y, expected, dtype)

    return Case(description, valid, lambda: sketchcore.sketched_matmul(x, S, U, **kwargs), check)


def backward_case(rng):
    """sketched_matmul_backward with valid gradients or broken needs/term ranges/shapes."""
    dtype = np.float64
    n, d_in, k, d_out, T = (int(v) for v in (rng.integers(0, 5), rng.integers(1, 5), rng.integers(1, 4),
                                             rng.integers(1, 5), rng.integers(1, 4)))
    x, S, U = _array(rng, (n, d_in), dtype), _array(rng, (T, d_in, k), dtype), _array(rng, (T, k, d_out), dtype)
    Z = np.einsum("ni,tik->ntk", x, S).reshape(n, T * k)
    g = _array(rng, (n, d_out), dtype)
    kwargs, valid = {}, True
    choice = rng.integers(0, 8)
    if choice == 0:
        kwargs["needs"], valid = rng.choice(["xS", "bias"]), False
    elif choice == 1:
        kwargs["S_terms"], valid = (int(rng.integers(-1, T + 2)), int(rng.integers(-1, T + 2))), None
    elif choice == 2:
        Z, valid = _array(rng, (n, T * k + 1), dtype), False
    elif choice == 3:
        U, valid = np.array(1.0), False
    elif choice == 4:
        kwargs["needs"] = ("x", "U")
    description = f"sketched_matmul_backward(g{g.shape}, x{x.shape}, S{S.shape}, U{U.shape}, Z{Z.shape}, {kwargs})"
    if valid is None:  # a term range: valid exactly when 0 ≤ begin ≤ end ≤ T
        b, e = kwargs["S_terms"]
        valid = 0 <= b <= e <= T

    def check(result):
        dx, dS, dU, _ = result
        Sp = S.transpose(1, 0, 2).reshape(d_in, T * k)  # [S_1 ... S_T]
        Up = U.reshape(T * k, d_out)                    # [U_1; ...; U_T]
        GU = g @ Up.T
        if dx is not None and not np.allclose(dx, GU @ Sp.T, atol=1e-9):
            return False
        if dU is not None and not np.allclose(dU, (Z.T @ g).reshape(T, k, d_out), atol=1e-9):
            return False
        if dS is not None:
            b, e = kwargs.get("S_terms", (0, T))
            full = (x.T @ GU).reshape(d_in, T, k).transpose(1, 0, 2)
            if not np.allclose(dS, full[b:e], atol=1e-9):
                return False
        return True

    return Case(description, valid, lambda: sketchcore.sketched_matmul_backward(g, x, S, U, Z, **kwargs), check)


def sketch_case(rng):
    """Sketch construction and application with valid and invalid extents."""
    kind = str(rng.choice(KINDS))
    m, n = int(rng.integers(1, 40)), int(rng.integers(1, 40))
    valid = True
    if kind == "srht" and m > 1 << max(0, (n - 1).bit_length()):
        valid = False
    nnz = int(rng.integers(1, 5))
    if kind == "sparse_sign" and nnz > m:
        valid = False
    bad = rng.integers(0, 10)
    if bad == 0:
        m, valid = int(rng.choice([0, -3, 2**31, 2**70])), False
    maker = getattr(sketchcore.sketch, kind)
    args = (m, n, nnz) if kind == "sparse_sign" else (m, n)
    seed = int(rng.integers(0, 2**63))
    side = str(rng.choice(["left", "right"]))
    p = int(rng.integers(0, 4))
    m_a = m if 1 <= m < 64 else 3  # an invalid m is refused before A's shape matters
    A = _array(rng, (n, p) if side == "left" else (p, m_a), np.float64)
    if rng.integers(0, 8) == 0:
        A, valid = _array(rng, (n + 1, p) if side == "left" else (p, m_a + 1), np.float64), False
    description = f"sketch.{kind}{args} seed={seed} apply(A{A.shape}, side={side})"

    def run():
        op = maker(*args, seed=seed)
        return op.apply(A, side), op

    def check(result):
        y, op = result
        dense = op.to_dense()
        expected = dense @ A if side == "left" else A @ dense
        return _close(y, expected, np.float64)

    return Case(description, valid, run, check)


def _performer_reference(q, k, v, W, kernel, causal, kw, vw):
    """Performer attention by the quadratic formula in float64 (sketchcore.performer_attention's)."""
    q, k, v, W = (np.asarray(a, np.float64) for a in (q, k, v, W))
    m, d = W.shape

    def phi(x, query):
        if kernel == "relu":
            return np.maximum(x @ W.T / np.sqrt(m), 0) + 1e-5
        x = x * d ** -0.25
        dash = x @ W.T
        diag = (x ** 2).sum(-1, keepdims=True) / 2
        if query:
            return (np.exp(dash - diag - dash.max(-1, keepdims=True)) + 1e-5) / np.sqrt(m)
        if causal:  # any constant shared by all keys cancels (no 1e-5): the largest exponent
            exponent = dash - diag
            return np.exp(exponent - (exponent.max() if exponent.size else 0.0)) / np.sqrt(m)
        top = dash.max(axis=(-1, -2), keepdims=True) if dash.size else 0.0
        return (np.exp(dash - diag - top) + 1e-5) / np.sqrt(m)
    scores = np.einsum("bhlf,bhsf->bhls", phi(q, True), phi(k, False))
    if kw is not None:
        scores = scores * np.asarray(kw, np.float64)[:, None, None, :]
    if causal:
        scores = scores * np.tril(np.ones(scores.shape[-2:]))
    weights = 1.0 if vw is None else np.asarray(vw, np.float64)[:, :, None, :]
    numerator = np.einsum("bhls,bhse->bhle", scores * weights, v)
    return numerator / np.maximum(scores.sum(-1, keepdims=True), np.finfo(np.float64).tiny)


def performer_case(rng):
    """performer_attention with valid and broken shapes, dtypes, kernels and causal lengths."""
    dtype = np.float64 if _maybe(rng, 0.6) else np.float32
    B, H, L, S, d, e, m = (int(v) for v in (rng.integers(0, 3), rng.integers(1, 3), rng.integers(0, 9),
                                          rng.integers(0, 9), rng.integers(1, 6), rng.integers(0, 5),
                                          rng.integers(1, 8)))
    if _maybe(rng, 0.1):  # the head sizes of real models (to 256) and lengths past a block (128)
        d, L, S, m = int(rng.choice([64, 96, 128, 160, 256])), int(rng.integers(100, 300)), int(rng.integers(1, 300)), 16
    kernel = str(rng.choice(["softmax", "relu"]))
    causal = _maybe(rng, 0.5)
    if causal:
        S = L
    valid, notes = True, []
    q, k, v, W = (_array(rng, shape, dtype) for shape in ((B, H, L, d), (B, H, S, d), (B, H, S, e), (m, d)))
    kw = (rng.random((B, S)) > 0.3).astype(dtype) if _maybe(rng, 0.3) else None
    vw = rng.random((B, H, S)).astype(dtype) if _maybe(rng, 0.3) else None
    bad = rng.integers(0, 12)
    if bad == 0:
        k, valid = _array(rng, (B, H, S, d + 1), dtype), False
    elif bad == 1:
        W, valid = _array(rng, (m, d, 1), dtype), False
    elif bad == 2 and L + 1 != S:
        k, v, valid = _array(rng, (B, H, L + 1, d), dtype), _array(rng, (B, H, L + 1, e), dtype), not causal
        notes.append("S = L + 1")
        if kw is not None or vw is not None:
            kw = vw = None
    elif bad == 3:
        kernel, valid = str(rng.choice(["exp", "Softmax", ""])), False
    elif bad == 4:
        v, valid = v.astype(np.float32 if dtype == np.float64 else np.float64), False
    elif bad == 5:
        kw, valid = rng.random((B, S + 1)), False
    q, k, v, W = (_layout(rng, a) for a in (q, k, v, W))
    description = (f"performer_attention(q{q.shape}, k{k.shape}, v{v.shape}, W{W.shape} {np.dtype(dtype)}, {kernel}, "
                   f"causal={causal}, kw={None if kw is None else kw.shape}, vw={None if vw is None else vw.shape}) "
                   f"{notes}")

    def check(out):
        if kernel == "softmax" and not causal and k.shape[2] == 0:
            return bool(np.all(np.asarray(out) == 0))  # no keys: 0/tiny
        expected = _performer_reference(q, k, v, W, kernel, causal, kw, vw)
        return _close(out, expected, dtype)

    return Case(description, valid, lambda: sketchcore.performer_attention(
        q, k, v, W, kernel=kernel, causal=causal, key_weights=kw, value_weights=vw), check)


def huge_case(rng):
    """Stride-0 torch views whose extents overflow 64-bit sizes: always refused."""
    # torch's own numel must fit (a + b + log2 d ≤ 62); the bytes (×4) often do not.
    d = int(rng.choice([1, 2, 4]))
    a = int(rng.integers(20, 32))
    b = min(int(rng.integers(20, 32)), 62 - a - d.bit_length() + 1)
    o = torch.ones(())
    x, S, U = o.expand(1, d), o.expand(2**a, d, 2**b), o.expand(2**a, 2**b, 1)
    description = f"sketched_matmul(expand(1, {d}), expand(2**{a}, {d}, 2**{b}), expand(2**{a}, 2**{b}, 1))"
    return Case(description, False, lambda: sketchcore.sketched_matmul(x, S, U))


MAKERS = ([matmul_case] * 5 + [backward_case] * 2 + [sketch_case] * 2 + [performer_case] * 2
          + ([huge_case] if torch is not None else []))


def verdict(case):
    try:
        result = case.run()
    except CLEAN as e:
        if case.valid:
            return f"BAD valid call raised {type(e).__name__}: {e}"
        if not str(e):
            return f"BAD {type(e).__name__} without a message"
        return f"raised {type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001 - any other type is a finding
        return f"BAD unexpected {type(e).__name__}: {e}"
    if not case.valid:
        return "BAD invalid call accepted"
    if case.check is not None and not case.check(result):
        return "BAD wrong values"
    return "ok"


def main(seed, count):
    rng = np.random.default_rng(seed)
    sketchcore.memory.set_limit(256 << 20)  # huge temporaries become MemoryError, fast
    for i in range(count):
        case = MAKERS[int(rng.integers(0, len(MAKERS)))](rng)
        print(f"CASE {i}: {case.description}", flush=True)
        result = verdict(case)
        leaked = sketchcore.memory.stats()["current_bytes"]
        if leaked:
            result = f"BAD {leaked} pool bytes still in use after the call"
        print(f"VERDICT {i}: {result}", flush=True)
    print("DONE", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
