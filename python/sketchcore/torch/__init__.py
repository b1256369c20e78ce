"""PyTorch adapters: sketchcore's sketched GEMM as torch custom operators; ``SKLinear``, a
drop-in for Panther's sketched linear layer; ``SKConv2d``, its sketched convolution; ``RandMultiHeadAttention`` / ``make_performer``,
its Performer attention (``performer_attention``, the differentiable kernel underneath);
``LowRankLinear``; ``QuantizedLowRankLinear`` (8-bit factors in a format: int8 for CPU inference,
fp8 for CUDA), its named forms ``Int8LowRankLinear`` and ``Fp8LowRankLinear``, and ``quantize_`` with
``Int8Config``/``Fp8Config``; and model compression
(``sketch_model``, ``restore_model``, ``register_linear``) with near-optimal conversions, from the
weights' SVD or data-aware (calibration inputs); and ONNX export (``export_onnx``, or
``onnx_translations`` for ``torch.onnx.export(..., dynamo=True, custom_translation_table=...)``).

Thin Python over the public API through DLPack (no torch C++ extension). The operators
have fake (meta) implementations and registered autograd, so ``torch.compile(model,
fullgraph=True)`` traces them without graph breaks, and they pass
``torch.library.opcheck``. Under ``torch.autocast`` their output has the region's dtype
(float16 or bfloat16): CUDA devices, and CPUs with bfloat16 instructions in bfloat16 regions,
compute from operands cast to it (float32 accumulation); elsewhere on the CPU a float32 input is
computed in float32 and only the output rounded (no 16-bit arithmetic would be faster there).
"""
from __future__ import annotations

from sketchcore.torch.layers._attention import RandMultiHeadAttention, make_performer
from sketchcore.torch.layers._conv import SKConv2d, sketched_conv2d
from sketchcore.torch.layers._derived_weight import DerivedWeight
from sketchcore.torch.compress._convert import ConversionReport, LayerReport, register_linear, restore_model, sketch_model
from sketchcore.torch.ops._functional import sketched_linear, sklinear
from sketchcore.torch.layers._fp8 import Fp8LowRankLinear
from sketchcore.torch.layers._int8 import Int8LowRankLinear
from sketchcore.torch.layers._int8_linear import Int8Linear
from sketchcore.torch.layers._lowrank import LowRankLinear
from sketchcore.torch.layers._quantized import QuantizedLowRankLinear
from sketchcore.torch.ops._memory_mode import low_rank_activations
from sketchcore.torch.layers._sklinear import SKLinear
from sketchcore.torch.ops._performer import performer_attention
from sketchcore.torch.compress._quantize import Fp8Config, Int8Config, quantize_
from sketchcore.torch.compress._calibration import Calibration
from sketchcore.torch.compress._heal import HealReport, heal
from sketchcore.torch.deploy import export_onnx, onnx_translations
from sketchcore.torch.ops._ops import _autocast_args  # noqa: F401 - tested directly

__all__ = ["Calibration", "ConversionReport", "DerivedWeight", "Fp8Config", "Fp8LowRankLinear", "HealReport", "Int8Config", "Int8Linear", "Int8LowRankLinear", "LayerReport",
           "LowRankLinear", "QuantizedLowRankLinear", "RandMultiHeadAttention", "SKConv2d", "SKLinear", "export_onnx", "heal", "low_rank_activations",
           "make_performer", "onnx_translations", "performer_attention", "quantize_", "register_linear", "restore_model", "sketch_model", "sketched_conv2d",
           "sketched_linear", "sklinear"]
