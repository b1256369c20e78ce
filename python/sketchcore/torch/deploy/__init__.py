"""Deploying sketched models outside Python: ONNX export (:func:`export_onnx`, and
:func:`onnx_translations` for ``torch.onnx.export``'s ``custom_translation_table``)."""
from __future__ import annotations

from sketchcore.torch.deploy._onnx import export_onnx, onnx_translations

__all__ = ["export_onnx", "onnx_translations"]
