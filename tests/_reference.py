"""Float64 reference of sketched_matmul, Panther's SKLinear formula, the int8 sketched GEMM's
quantized reference, and the comparison helpers the tests share."""
import math

import numpy as np

ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu")
TOLERANCE = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}

_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def activate(z, name):
    if name == "none":
        return z
    if name == "relu":
        return np.where(z < 0, 0.0, z)
    if name == "gelu":
        return 0.5 * z * _erfc(-z / math.sqrt(2.0))  # = ½z(1 + erf(z/√2)) without cancellation
    if name == "gelu_tanh":
        u = math.sqrt(2.0 / math.pi) * (z + 0.044715 * z**3)
        with np.errstate(over="ignore"):
            return z / (1.0 + np.exp(-2.0 * u))  # = ½z(1 + tanh(u)) without cancellation
    if name == "silu":
        with np.errstate(over="ignore"):
            return z / (1.0 + np.exp(-z))
    raise AssertionError(name)


def reference(x, S, U, bias=None, activation="none", scale=1.0):
    """act(scale * sum_t (x @ S[t]) @ U[t] + bias) in float64, term by term."""
    x = np.asarray(x, dtype=np.float64)
    S = np.asarray(S, dtype=np.float64)
    U = np.asarray(U, dtype=np.float64)
    if S.ndim == 2:
        S, U = S[None], U[None]
    z = np.zeros(x.shape[:-1] + (U.shape[-1],))
    for t in range(S.shape[0]):
        z += (x @ S[t]) @ U[t]
    z = scale * z
    if bias is not None:
        z = z + np.asarray(bias, dtype=np.float64)
    return activate(z, activation)


def panther_reference(x, S1s, S2s, U1s, U2s, bias):
    """Panther's formula, term by term (NumPy arrays or torch tensors, in their dtype):
    1/(2T) Σ_t [(x S1_t) U1_t + (x U2_t) S2_t] + b."""
    T = S1s.shape[0]
    total = sum((x @ S1s[t]) @ U1s[t] + (x @ U2s[t]) @ S2s[t] for t in range(T))
    return total / (2 * T) + (0 if bias is None else bias)


def relative_error(y, ref):
    y = np.asarray(y, dtype=np.float64)
    den = np.linalg.norm(ref)
    num = np.linalg.norm(y - ref)
    return num / den if den > 0 else num


def assert_close(y, ref, dtype, magnitude=None):
    """‖y − ref‖ ≤ tolerance · ‖ref‖, or · ‖magnitude‖ when given: the same computation on absolute
    values, the scale of a GEMM's rounding error (γ_n |x||S||U|). A result that cancels to a
    fraction of its terms (one output of d_in terms, hypothesis found 6.7e-5 for float32) is only
    as accurate as the terms are large."""
    err = relative_error(y, ref)
    if magnitude is not None:
        err = float(np.linalg.norm(np.asarray(y, np.float64) - ref)) / max(float(np.linalg.norm(magnitude)),
                                                                            float(np.linalg.norm(ref)), 1e-300)
    # Below the dtype's smallest normal the result cannot carry relative accuracy: a float64
    # reference of -4e-53 is -0.0 in float32 (hypothesis found gelu(-15.5)).
    underflow = np.max(np.abs(np.asarray(y, np.float64) - ref), initial=0.0) <= np.finfo(dtype).tiny
    assert err <= TOLERANCE[np.dtype(dtype)] or underflow, f"relative error {err:.3g} for {np.dtype(dtype)}"


def random_problem(rng, lead, d_in, k, d_out, terms=None, dtype=np.float32, bias=True):
    """x (*lead, d_in), S, U (2-D when terms is None) and bias, scaled to keep values O(1)."""
    x = rng.standard_normal((*lead, d_in)).astype(dtype)
    s_shape = (d_in, k) if terms is None else (terms, d_in, k)
    u_shape = (k, d_out) if terms is None else (terms, k, d_out)
    S = (rng.standard_normal(s_shape) / math.sqrt(max(d_in, 1))).astype(dtype)
    U = (rng.standard_normal(u_shape) / math.sqrt(max(k, 1))).astype(dtype)
    b = rng.standard_normal(d_out).astype(dtype) if bias else None
    return x, S, U, b


# The int8 sketched GEMM's quantized math (int8_sketched_matmul), shared by its CPU and GPU tests.

def q8_rows(x):
    """Per-row symmetric quantization in float32, as documented (q = rint(x · (127/max|x|))):
    (q as int64, row scales max|x|/127). A row whose maximum is below 2^-64 is first multiplied,
    with its maximum, by 2^64 (exact), where 127/max|x| would overflow float32."""
    x = np.asarray(x, np.float32)
    max_abs = np.abs(x).max(axis=-1) if x.shape[-1] else np.zeros(x.shape[0], np.float32)
    scale = (max_abs / np.float32(127)).astype(np.float32)
    boost = np.where(max_abs < np.float32(2.0**-64), np.float32(2.0**64), np.float32(1)).astype(np.float32)
    inverse = np.float32(127) / np.where(max_abs == 0, np.float32(1), max_abs * boost)
    q = np.clip(np.rint((x * boost[:, None]) * inverse[:, None]), -127, 127).astype(np.int64)
    return q, scale


def dequantized(q, row_scale, col_scale):
    """float32(Σ) · (row scale · column scale), rounded as float32 like the kernels."""
    scale = (row_scale[:, None] * col_scale[None, :]).astype(np.float32)
    return (q.astype(np.float32) * scale).astype(np.float32)


def quantized_reference(x, S, U, bias, activation, inner):
    """The quantized math, step by step: exact int64 sums, float32 dequantization."""
    x2 = np.asarray(x, np.float32).reshape(-1, x.shape[-1])
    qx, sx = q8_rows(x2)
    z = dequantized(qx @ S.q.astype(np.int64), sx, S.scale)
    z = activate(z.astype(np.float64), inner).astype(np.float32)
    qz, sz = q8_rows(z)
    y = dequantized(qz @ U.q.astype(np.int64), sz, U.scale).astype(np.float64)
    if bias is not None:
        y = y + np.asarray(bias, np.float64)
    return activate(y, activation).reshape(x.shape[:-1] + (U.shape[1],))
