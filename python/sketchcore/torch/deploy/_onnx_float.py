"""ONNX translations of sketchcore's float custom operators into standard ONNX operators
(onnxscript, traced): ``sketchcore::sketched_linear`` (LowRankLinear and the functional
``sketched_linear``), ``sketchcore::sklinear`` (SKLinear) and ``sketchcore::performer_attention``
(RandMultiHeadAttention). ``TRANSLATIONS`` maps each operator overload to its translation;
:mod:`sketchcore.torch.deploy._onnx` merges it into the exporter's ``custom_translation_table``.

Every translation writes the operator's formula with ONNX-domain operators only (MatMul, Add,
Mul, Relu, Erf, Tanh, Sigmoid, Exp, Reduce*, Where, ...), at opset 18 (the exporter's default; the
activations therefore spell GELU out with Erf or Tanh rather than opset 20's ``Gelu``):

* sketched_linear: ``y = act(scale · σ(x·[S_1 … S_T])·[U_1; …; U_T] + bias)`` — the T terms as
  one pair of MatMuls over the packed factors, as the core computes them; the second output Z is
  the packed product x·[S_1 … S_T] (unused in an inference graph, so the optimiser drops it).
* sklinear: Panther's ``1/(2T) Σ_t [(x S1_t) U1_t + (x U2_t) S2_t] + b`` as sketched_linear over
  ``[S1s; U2s]`` and ``[U1s; S2s]`` with scale 1/(2T).
* performer_attention: the formulas of ``ops/_performer_formulas.reference_attention`` in at
  least float32. Non-causal attention stays linear in the sequence length (φ(K)ᵀV first);
  causal attention forms the masked L × L product of the features (exact, but quadratic memory
  in L: ONNX has no loop-free running state), with causal softmax keys taken relative to the
  running maximum of their exponents, so nothing overflows or underflows where the kernels'
  running constant would not.

Dropout is an inference no-op: a graph whose operator still carries ``dropout_p > 0`` (a model
exported in training mode) is refused with a ValueError that says to call ``model.eval()``.
"""
from __future__ import annotations

import math
from typing import Any, Optional

import onnx_ir as ir
import torch
from onnxscript.onnx_opset import opset18 as op

from sketchcore.torch._common import ACTIVATIONS

_GELU_TANH = math.sqrt(2.0 / math.pi)


def _const(value: float, like: Any) -> Any:
    """A scalar constant in `like`'s element type."""
    return op.CastLike(op.Constant(value_float=float(value)), like)


def _axes(*axes: int) -> Any:
    return op.Constant(value_ints=list(axes))


def activation(z: Any, name: str) -> Any:
    """sketchcore's activation `name` (the table of ``sketchcore.torch._common``) as ONNX operators."""
    if name == "none":
        return z
    if name == "relu":
        return op.Relu(z)
    if name == "gelu":  # erf form: z/2 · (1 + erf(z/√2))
        inner = op.Erf(op.Mul(z, _const(1.0 / math.sqrt(2.0), z)))
        return op.Mul(op.Mul(z, _const(0.5, z)), op.Add(inner, _const(1.0, z)))
    if name == "gelu_tanh":  # z/2 · (1 + tanh(√(2/π)(z + 0.044715 z³)))
        cube = op.Mul(op.Mul(z, z), z)
        inner = op.Tanh(op.Mul(op.Add(z, op.Mul(cube, _const(0.044715, z))), _const(_GELU_TANH, z)))
        return op.Mul(op.Mul(z, _const(0.5, z)), op.Add(inner, _const(1.0, z)))
    if name == "silu":
        return op.Mul(z, op.Sigmoid(z))
    raise ValueError(f"sketchcore ONNX export: activation: expected one of {ACTIVATIONS}, got {name!r}")


def _rank(value: Any, name: str) -> int:
    shape = getattr(value, "shape", None)
    if shape is None:
        raise ValueError(f"sketchcore ONNX export: {name}: expected a tensor of known rank, got one without a shape")
    return len(shape)


def _no_dropout(dropout_p: float, where: str) -> None:
    if dropout_p > 0:
        raise ValueError(f"sketchcore ONNX export: {where}: dropout_p: expected 0 (dropout is identity at inference; "
                         f"call model.eval() before exporting), got {dropout_p}")


def _packed(S: Any, U: Any, S_terms: bool, U_terms: bool) -> tuple[Any, Any]:
    """[S_1 … S_T] (d_in, T·k) and [U_1; …; U_T] (T·k, d_out) from factors with terms (3-D);
    2-D factors unchanged."""
    if S_terms:
        S = op.Flatten(op.Transpose(S, perm=[1, 0, 2]), axis=1)
    if U_terms:
        U = op.Flatten(U, axis=2)
    return S, U


def _sketched(x: Any, S: Any, U: Any, bias: Optional[Any], act: str, scale: float, inner: str) -> tuple[Any, Any]:
    """(y, Z) of ``act(scale · σ(x S) U + bias)`` for packed 2-D factors."""
    z = op.MatMul(x, S)
    y = op.MatMul(activation(z, inner), U)
    if scale != 1.0:
        y = op.Mul(y, _const(scale, y))
    if bias is not None:
        y = op.Add(y, bias)
    return activation(y, act), z


def sketched_linear(x: Any, S: Any, U: Any, bias: Optional[Any] = None, activation: str = "none",
                    scale: float = 1.0, dropout_p: float = 0.0, seed: Any = None,
                    inner_activation: str = "none") -> tuple[Any, Any]:
    """``sketchcore::sketched_linear`` → (y, Z)."""
    _no_dropout(dropout_p, "sketched_linear")
    S, U = _packed(S, U, _rank(S, "S") == 3, _rank(U, "U") == 3)
    return _sketched(x, S, U, bias, activation, scale, inner_activation)


def sklinear(x: Any, S1s: Any, S2s: Any, U1s: Any, U2s: Any, bias: Optional[Any] = None, activation: str = "none",
             dropout_p: float = 0.0, seed: Any = None) -> tuple[Any, Any]:
    """``sketchcore::sklinear`` → (y, Z): the 2T terms of [S1s; U2s], [U1s; S2s], scaled 1/(2T)."""
    _no_dropout(dropout_p, "sklinear")
    terms = S1s.shape[0] if S1s.shape is not None else None
    if not isinstance(terms, int):
        raise ValueError(f"sketchcore ONNX export: sklinear: S1s: expected a static number of terms, got {terms!r}")
    S, U = _packed(op.Concat(S1s, U2s, axis=0), op.Concat(U1s, S2s, axis=0), True, True)
    return _sketched(x, S, U, bias, activation, 1.0 / (2 * terms), "none")


# --- Performer attention ----------------------------------------------------------------------------


def _features(x: Any, W: Any, dims: tuple[int, int], kernel: str, role: str) -> Any:
    """φ(x) for x (B, H, L, d) and W (m, d), dims = (m, d); `role` "query", "key" or "causal_key"
    (the causal softmax keys' exponents, which _causal_softmax forms into features)."""
    m, d = dims
    Wt = op.Transpose(W, perm=[1, 0])
    if kernel == "relu":
        return op.Add(op.Relu(op.Div(op.MatMul(x, Wt), _const(math.sqrt(m), x))), _const(1e-5, x))
    x = op.Mul(x, _const(d ** -0.25, x))
    dash = op.MatMul(x, Wt)
    half_norm = op.Div(op.ReduceSum(op.Mul(x, x), _axes(-1), keepdims=1), _const(2.0, x))
    exponent = op.Sub(dash, half_norm)
    if role == "causal_key":
        return exponent
    top = op.ReduceMax(dash, _axes(-1) if role == "query" else _axes(-1, -2), keepdims=1)
    return op.Div(op.Add(op.Exp(op.Sub(exponent, top)), _const(1e-5, x)), _const(math.sqrt(m), x))


def _causal_mask(like: Any) -> Any:
    """The (L, L) bool mask j ≤ i for `like`'s second-to-last dimension L."""
    length = op.Squeeze(op.Shape(like, start=-2, end=-1), _axes(0))
    index = op.Range(op.Constant(value_int=0), length, op.Constant(value_int=1))
    return op.LessOrEqual(op.Unsqueeze(index, _axes(0)), op.Unsqueeze(index, _axes(1)))


def _causal_softmax(phi_q: Any, exponent: Any, m: int, key_weights: Optional[Any]) -> Any:
    """The masked (B, H, L, L) products φ(q_i)·φ(k_j), j ≤ i, of causal softmax keys given by their
    exponents: each key relative to its own maximum r_j, then scaled by exp(r_j − C_i), C_i the
    running maximum of r over j ≤ i (both factors ≤ 1)."""
    r = op.ReduceMax(exponent, _axes(-1), keepdims=1)  # (B, H, L, 1)
    g = op.Div(op.Exp(op.Sub(exponent, r)), _const(math.sqrt(m), exponent))
    if key_weights is not None:
        g = op.Mul(g, op.Unsqueeze(key_weights, _axes(1, 3)))
    rows = op.Where(_causal_mask(exponent), op.Transpose(r, perm=[0, 1, 3, 2]), _const(-math.inf, r))  # r_j, j ≤ i
    running = op.ReduceMax(rows, _axes(-1), keepdims=1)  # C_i (B, H, L, 1)
    return op.Mul(op.MatMul(phi_q, op.Transpose(g, perm=[0, 1, 3, 2])), op.Exp(op.Sub(rows, running)))


def _attention_terms(q: Any, k: Any, v: Any, W: Any, dims: tuple[int, int], kernel: str, causal: bool,
                     key_weights: Optional[Any]) -> tuple[Any, Any]:
    """(numerator (B, H, L, e), normaliser (B, H, L, 1)) in the compute dtype; dims = W's (m, d)."""
    phi_q = _features(q, W, dims, kernel, "query")
    if causal and kernel == "softmax":
        scores = _causal_softmax(phi_q, _features(k, W, dims, kernel, "causal_key"), dims[0], key_weights)
        return op.MatMul(scores, v), op.ReduceSum(scores, _axes(-1), keepdims=1)
    phi_k = _features(k, W, dims, kernel, "key")
    if key_weights is not None:
        phi_k = op.Mul(phi_k, op.Unsqueeze(key_weights, _axes(1, 3)))
    if causal:
        scores = op.MatMul(phi_q, op.Transpose(phi_k, perm=[0, 1, 3, 2]))
        scores = op.Where(_causal_mask(scores), scores, _const(0.0, scores))
        return op.MatMul(scores, v), op.ReduceSum(scores, _axes(-1), keepdims=1)
    numerator = op.MatMul(phi_q, op.MatMul(op.Transpose(phi_k, perm=[0, 1, 3, 2]), v))
    key_sum = op.ReduceSum(phi_k, _axes(-2), keepdims=1)  # (B, H, 1, m)
    return numerator, op.ReduceSum(op.Mul(phi_q, key_sum), _axes(-1), keepdims=1)


def performer_attention(q: Any, k: Any, v: Any, features: Any, key_weights: Optional[Any] = None,
                        value_weights: Optional[Any] = None, kernel: str = "softmax", causal: bool = False) -> Any:
    """``sketchcore::performer_attention`` → out (B, H, L, e) in q's dtype, computed in at least float32."""
    if kernel not in ("softmax", "relu"):
        raise ValueError(f"sketchcore ONNX export: performer_attention: kernel: expected 'softmax' or 'relu', "
                         f"got {kernel!r}")
    compute = ir.DataType.DOUBLE if q.dtype == ir.DataType.DOUBLE else ir.DataType.FLOAT
    widened = [None if t is None else op.Cast(t, to=compute) for t in (q, k, v, features, key_weights, value_weights)]
    qc, kc, vc, W, kw, vw = widened
    if vw is not None:
        vc = op.Mul(vc, op.Unsqueeze(vw, _axes(-1)))
    dims = (features.shape[0], features.shape[1])
    numerator, normaliser = _attention_terms(qc, kc, vc, W, dims, kernel, bool(causal), kw)
    tiny = float(torch.finfo(torch.float64 if compute == ir.DataType.DOUBLE else torch.float32).tiny)
    out = op.Div(numerator, op.Max(normaliser, _const(tiny, normaliser)))
    return op.CastLike(out, q)


#: torch operator overload → translation (the float layers' operators).
TRANSLATIONS: dict = {
    torch.ops.sketchcore.sketched_linear.default: sketched_linear,
    torch.ops.sketchcore.sklinear.default: sklinear,
    torch.ops.sketchcore.performer_attention.default: performer_attention,
}
