"""ONNX export of sketched models: the translation table of sketchcore's custom operators
(:func:`onnx_translations`) and :func:`export_onnx`, ``torch.onnx.export(dynamo=True)`` with it.

Why a table to pass, not a global registration (torch 2.13, onnxscript 0.7): the exporter builds a
fresh registry on every call (``ONNXRegistry.from_torchlib()`` in
``torch/onnx/_internal/exporter/_compat.py``) from torch's and onnxscript's own torchlib lists, and
adds only the caller's ``custom_translation_table``. The only global places it reads are private:
the torchlib list (``_torchlib_registry._registry``, torch's internal ATen functions) and
``torch._decomp.decomposition_table`` (which would decompose our operators into ATen ones in every
consumer of that table, FakeTensor included, not only the ONNX exporter). ``torch.onnx.ops`` adds
ONNX nodes to a torch graph, which would mean replacing the layers' forward for export. So the
supported way is the public argument: ``torch.onnx.export(model, args, dynamo=True,
custom_translation_table=sketchcore.torch.onnx_translations())``, or :func:`export_onnx`, which
passes it. The exported torch graph keeps ``sketchcore::*`` operators; only their ONNX lowering is ours.

The legacy TorchScript exporter (``dynamo=False``, deprecated by torch since 2.9) is not
supported: :func:`export_onnx` refuses ``dynamo=False`` naming the supported call, and so does the
first sketchcore operator a plain ``torch.onnx.export(..., dynamo=False)`` traces
(``_common.refuse_legacy_onnx_export``, which reads ``torch.onnx`` only when it is already imported).
Registering legacy symbolic functions would need ``torch.onnx`` imported whenever sketchcore is (its
legacy symbolic tables take about as long to import as ``sketchcore.torch`` itself), for every user,
to serve an exporter torch has deprecated.
"""
from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

import torch

if TYPE_CHECKING:  # torch.onnx is slow to import: only when exporting
    from torch.onnx import ONNXProgram

#: The optional packages export needs (the ``onnx`` extra).
_EXTRA = ("onnx", "onnxscript")


def _require_extra(where: str) -> None:
    for name in _EXTRA:
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise ImportError(f"{where}: expected the optional package {name!r} (pip install 'sketchcore[onnx]'), "
                              f"got ImportError: {e}") from e


def onnx_translations() -> dict[Callable[..., Any], Callable[..., Any]]:
    """The ONNX translations of sketchcore's custom operators, for ``torch.onnx.export``'s
    ``custom_translation_table``: each ``torch.ops.sketchcore.*`` overload a sketched model's
    exported graph can hold, mapped to an onnxscript function that writes it with standard ONNX
    operators only (MatMul, Add, the activations, ...).

    Returns
    -------
    dict
        A new dict (yours to extend): torch operator overload → onnxscript translation.

    Raises
    ------
    ImportError
        ``onnx`` or ``onnxscript`` is not installed (the ``sketchcore[onnx]`` extra).

    Examples
    --------
    >>> import torch
    >>> from sketchcore.torch import LowRankLinear, onnx_translations
    >>> model = LowRankLinear(16, 8, rank=4).eval()
    >>> program = torch.onnx.export(model, (torch.randn(2, 16),), dynamo=True,
    ...                             custom_translation_table=onnx_translations())  # doctest: +SKIP
    >>> torch.ops.sketchcore.sketched_linear.default in onnx_translations()
    True
    """
    _require_extra("onnx_translations")
    from sketchcore.torch.deploy import _onnx_float, _onnx_int8
    return {**_onnx_float.TRANSLATIONS, **_onnx_int8.TRANSLATIONS}


def _checked_table(table: object) -> dict[Any, Any]:
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise TypeError(f"export_onnx: custom_translation_table: expected a dict or None, got {type(table).__name__}")
    return table


def export_onnx(model: torch.nn.Module, args: Union[tuple[Any, ...], torch.Tensor],
                f: Optional[Union[str, os.PathLike[str]]] = None, **kwargs: Any) -> ONNXProgram:
    """``torch.onnx.export(model, args, f, dynamo=True, **kwargs)`` with sketchcore's translations
    (:func:`onnx_translations`) merged under any ``custom_translation_table`` you pass (your
    entries win for the same operator). Export an inference model: call ``model.eval()`` first
    (dropout is identity in the graph; an operator with dropout on is refused).

    Parameters
    ----------
    model : torch.nn.Module
    args : tuple or Tensor
        The example inputs (a Tensor stands for a 1-tuple).
    f : str or os.PathLike, optional
        Where to save the ONNX model (None: not saved; use the returned program's ``save``).
    **kwargs
        Passed to ``torch.onnx.export`` (``dynamic_shapes``, ``opset_version``, ``kwargs``, ...);
        ``dynamo`` may only be True.

    Returns
    -------
    torch.onnx.ONNXProgram
        ``.model_proto`` the ONNX model; its graph holds only standard ONNX operators.

    Raises
    ------
    TypeError
        ``model`` not a ``torch.nn.Module``; ``args`` neither a tuple nor a Tensor;
        ``custom_translation_table`` not a dict.
    ValueError
        ``dynamo=False`` (the legacy exporter has no translations of sketchcore's operators).
    ImportError
        ``onnx`` or ``onnxscript`` is not installed.
    torch.onnx.errors.ConversionError
        As ``torch.onnx.export`` (for example a model left in training mode with dropout).

    Examples
    --------
    >>> import torch
    >>> from sketchcore.torch import LowRankLinear, export_onnx
    >>> program = export_onnx(LowRankLinear(16, 8, rank=4).eval(), (torch.randn(2, 16),))  # doctest: +SKIP
    >>> export_onnx(LowRankLinear(16, 8, rank=4), (torch.randn(2, 16),), dynamo=False)
    Traceback (most recent call last):
    ValueError: export_onnx: dynamo: expected True (torch's dynamo exporter, where sketchcore's operators have ONNX translations), got False
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"export_onnx: model: expected a torch.nn.Module, got {type(model).__name__}")
    if isinstance(args, torch.Tensor):
        args = (args,)
    if not isinstance(args, tuple):
        raise TypeError(f"export_onnx: args: expected a tuple of inputs or a Tensor, got {type(args).__name__}")
    dynamo = kwargs.pop("dynamo", True)
    if dynamo is not True:
        raise ValueError(f"export_onnx: dynamo: expected True (torch's dynamo exporter, where sketchcore's operators "
                         f"have ONNX translations), got {dynamo!r}")
    table = {**onnx_translations(), **_checked_table(kwargs.pop("custom_translation_table", None))}
    return torch.onnx.export(model, args, f, dynamo=True, custom_translation_table=table, **kwargs)
