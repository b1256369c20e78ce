"""ONNX translations of the int8 layers' custom operators (``sketchcore::int8_sketched_linear``,
``sketchcore::int8_linear``) into standard ONNX (opset 18, the default domain only), for
``torch.onnx.export(..., dynamo=True)``; :mod:`sketchcore.torch.deploy._onnx` merges
``TRANSLATIONS`` into its table. fp8 (``sketchcore::fp8_sketched_linear``) is not translated:
e4m3 needs opset 19 or newer beside these opset 18 functions, and no runtime checked it against
the CUDA kernels; its entry raises, naming the way out (int8, or the float model).

The graph reproduces sketchcore's int8 arithmetic (``src/cpp/cpu/int8_gemm.cpp``): each row of the
activations is quantized symmetrically, ``s = max|row| / 127``, codes ``round_half_even(row · (127 /
max|row|))`` clipped to ±127 (an all-zero row gives zeros), computed in float32 as the core does;
``MatMulInteger`` accumulates exactly in int32; the product is dequantized by the row
scale times the factor's column scales, then the inner activation (sketched product: quantized
again per row for U), the bias and the activation. ``DynamicQuantizeLinear`` was not used: it
quantizes the whole tensor with one asymmetric uint8 scale, another (coarser for small rows)
arithmetic than ours.

Both operands enter ``MatMulInteger`` as uint8 codes + 128 with zero point 128 (the same integers):
onnxruntime's x86 kernel for uint8 × int8 runs on ``VPMADDUBSW`` where the CPU has no VNNI, whose
16-bit pair sums saturate for 8-bit weights (errors of 10 % of the output measured on an AVX2
machine), while uint8 × uint8 widens to 16 bits first and is exact. The column scales multiply the
int32 product before the row scales: onnxruntime fuses ``MatMulInteger``, ``Cast`` and the first
``Mul`` into one kernel that misreads a per-row scale there. Of the exact forms measured on an
AVX2 machine (uint8 × uint8, a float ``MatMul`` of the codes as QDQ would run, int8 × int8), uint8 ×
uint8 was the fastest and keeps one byte per weight; uint8 × int8 and ``DynamicQuantizeLinear`` were
faster and wrong there. The weights' offset (``Cast``, ``Add``, ``Cast`` of an initializer) is
folded to a constant by the exporter. The translations are traced (plain functions over
onnxscript's opset 18): the activation names are Python strings, so each call emits only its own
activation's nodes."""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from onnxscript import opset18


from sketchcore.torch.deploy._onnx_float import activation as _activation
from sketchcore.torch.ops import _quantized_ops  # noqa: F401 - registers the operators

__all__ = ["TRANSLATIONS"]

_UINT8, _FLOAT = 2, 1  # onnx.TensorProto.UINT8, FLOAT
op: Any = opset18  # traced with Python constants, which onnxscript's typed signatures do not list


def _offset(codes: Any) -> Any:
    """Codes in [-127, 127] (float or int8) as uint8 codes + 128 (zero point 128): see the module's note."""
    return op.Cast(op.Add(op.Cast(codes, to=_FLOAT), 128.0), to=_UINT8)


def _quantize_rows(x: Any) -> tuple[Any, Any]:
    """Codes of each row of float32 ``x`` as the core computes them, offset by 128 as uint8, and
    the row scales (..., 1)."""
    largest = op.ReduceMax(op.Abs(x), op.Constant(value_ints=[-1]), keepdims=1)
    safe = op.Where(op.Equal(largest, 0.0), op.CastLike(1.0, largest), largest)  # an all-zero row: codes 0
    codes = op.Clip(op.Round(op.Mul(x, op.Div(op.CastLike(127.0, x), safe))), op.CastLike(-127.0, x),
                    op.CastLike(127.0, x))
    return _offset(codes), op.Div(largest, 127.0)


def _int8_product(x: Any, codes: Any, scale: Any) -> Any:
    """deq(q8(x) codes): float32 (..., n) of float32 x (..., k) and int8 codes (k, n), scales (n,)."""
    xq, row_scale = _quantize_rows(x)
    zero = op.Cast(op.Constant(value_int=128), to=_UINT8)
    acc = op.Cast(op.MatMulInteger(xq, _offset(codes), zero, zero), to=_FLOAT)
    return op.Mul(op.Mul(acc, scale), row_scale)


def _as_float32(x: Any, y_of: Callable[[Any], Any]) -> Any:
    """``y_of`` on x in float32, the result cast back to x's type (the layers' float32 round trip)."""
    return op.CastLike(y_of(op.Cast(x, to=_FLOAT)), x)


def _epilogue(y: Any, bias: Optional[Any], activation: str) -> Any:
    return _activation(y if bias is None else op.Add(y, bias), activation)


def int8_sketched_linear(x: Any, S_q: Any, S_scale: Any, U_q: Any, U_scale: Any, bias: Optional[Any] = None,
                         activation: str = "none", inner_activation: str = "none") -> Any:
    """``act(deq(q8(σ(deq(q8(x) S_q))) U_q) + bias)`` in standard ONNX."""
    def body(x32: Any) -> Any:
        z = _activation(_int8_product(x32, S_q, S_scale), inner_activation)
        return _epilogue(_int8_product(z, U_q, U_scale), bias, activation)
    return _as_float32(x, body)


def int8_linear(x: Any, W_q: Any, W_scale: Any, bias: Optional[Any] = None, activation: str = "none") -> Any:
    """``act(deq(q8(x) W_q) + bias)`` in standard ONNX."""
    return _as_float32(x, lambda x32: _epilogue(_int8_product(x32, W_q, W_scale), bias, activation))


def fp8_sketched_linear(*args: Any, **kwargs: Any) -> Any:
    """No ONNX form: raises NotImplementedError naming the alternatives."""
    raise NotImplementedError("sketchcore ONNX export: sketchcore::fp8_sketched_linear: expected layers with an ONNX "
                              "translation, got an fp8 layer (Fp8LowRankLinear): fp8 (e4m3) factors have no ONNX "
                              "export; quantize the model to 'int8' (quantize_(model, 'int8')) or export the float "
                              "model (torch.export.export still traces the fp8 model)")


#: torch operator overload → its ONNX translation (custom_translation_table entries).
TRANSLATIONS: dict[torch._ops.OpOverload, Callable[..., Any]] = {
    torch.ops.sketchcore.int8_sketched_linear.default: int8_sketched_linear,
    torch.ops.sketchcore.int8_linear.default: int8_linear,
    torch.ops.sketchcore.fp8_sketched_linear.default: fp8_sketched_linear,
}
