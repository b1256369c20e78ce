"""``Calibration``: one pass of calibration inputs through a model, kept to serve several
conversions — the batches, the Gram matrix XᵀX of the inputs of each linear layer (float64,
one shared tensor for layers fed the same input, so that their whitening factor is computed
once: ``_whitened.whitening``) and the model's own outputs (the reference its converted copies
are measured against, so measuring them runs each batch once, not twice)."""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional, Union, overload

from torch import Tensor, nn

from sketchcore.torch.compress import _calibrate
from sketchcore.torch.compress._registry import read_linear, spec_of

#: The model's outputs are kept as references while they take at most this many bytes in all.
REFERENCE_BYTES = 256 * 2**20


class Calibration(Sequence[Any]):
    """Calibration inputs run once through ``model`` (eval mode, no gradients): the Gram matrix
    of the inputs each linear layer receives (those ``sketch_model`` converts: ``nn.Linear``,
    ``transformers``' ``Conv1D``, types given to ``register_linear``) and the model's outputs,
    kept for every conversion that uses it. Pass it as ``sketch_model(..., calibration=cal)``
    instead of the batches: the conversion runs no calibration pass, layers fed the same input
    (q, k, v; gate, up) share one Gram matrix and its factorisation (computed at the first
    conversion, reused by the next ones), and the converted model is measured against the kept
    outputs (one pass over the batches instead of two).

    A Calibration describes the model it was built on: use it to convert that model or copies of
    it (``copy.deepcopy``), layers being matched by qualified name. A layer it has no Gram
    matrix for is treated as never called (kept dense); a conversion none of whose layers it
    knows, or whose layer has another input width, raises ``ValueError``. Its Gram matrices are
    shared, read-only tensors. It is a sequence of its batches (``len(cal)``, ``cal[0]``).

    Parameters
    ----------
    model : nn.Module
        The trained model (not modified; its modules' training flags are restored).
    data : iterable
        Model inputs: tensors, tuples of positional arguments or dicts of keyword arguments
        (iterated once and kept).

    Raises
    ------
    TypeError
        ``model`` is not an ``nn.Module``; ``data`` is not an iterable of model inputs.
    ValueError
        ``data`` is empty.

    Examples
    --------
    >>> import copy
    >>> import torch
    >>> from torch import nn
    >>> from sketchcore.torch import Calibration, sketch_model
    >>> _ = torch.manual_seed(0)
    >>> model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
    >>> cal = Calibration(model, [torch.randn(64, 16) for _ in range(4)])
    >>> len(cal), sorted(cal.layer_names)
    (4, ['0', '2'])
    >>> small = copy.deepcopy(model)
    >>> report = sketch_model(small, param_ratio=0.25, calibration=cal)
    >>> half = copy.deepcopy(model)
    >>> report = sketch_model(half, param_ratio=0.5, calibration=cal)
    """

    def __init__(self, model: nn.Module, data: Iterable[Any]) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"Calibration: model: expected a torch.nn.Module, got {type(model).__name__}")
        self._batches = _calibrate.batches_of(data, "Calibration: data")
        self._grams: dict[str, Tensor] = {}
        self._widths: dict[str, int] = {}
        self._references: Optional[list[Optional[Tensor]]] = None
        self._collected = False
        self._collect(model, linear_layers(model))

    @classmethod
    def deferred(cls, batches: list[Any]) -> "Calibration":
        """A Calibration over ``batches`` that runs them at its first :meth:`grams_for`, for the
        layers asked for only (what ``sketch_model`` builds from plain batches)."""
        self = cls.__new__(cls)
        self._batches = batches
        self._grams, self._widths, self._references, self._collected = {}, {}, None, False
        return self

    def _collect(self, model: nn.Module, layers: Mapping[str, tuple[nn.Module, int]]) -> None:
        references: list[Optional[Tensor]] = []
        budget = [REFERENCE_BYTES]

        def keep(output: Any) -> None:
            tensor = _calibrate.first_tensor(output)
            size = tensor.numel() * tensor.element_size() if tensor is not None else 0
            budget[0] -= size
            references.append(tensor.detach() if tensor is not None and budget[0] >= 0 else None)

        self._grams = _calibrate.collect_grams(model, layers, self._batches, keep)
        self._widths = {name: width for name, (_, width) in layers.items()}
        self._references = references if budget[0] >= 0 else None
        self._collected = True

    @property
    def layer_names(self) -> frozenset[str]:
        """The qualified names of the layers it watched (called or not)."""
        return frozenset(self._widths)

    @property
    def grams(self) -> Mapping[str, Tensor]:
        """XᵀX (float64, d_in × d_in) per layer called on the batches; layers fed the same input
        map to the same tensor. Read-only."""
        return dict(self._grams)

    def reference_outputs(self) -> Optional[list[Optional[Tensor]]]:
        """The model's first output tensor on each batch (None when they were too large to keep)."""
        return self._references

    def grams_for(self, model: nn.Module, layers: Mapping[str, tuple[nn.Module, int]]) -> dict[str, Tensor]:
        """The Gram matrix of each of ``layers`` (name → (module, d_in)) it has one for. A
        deferred Calibration runs its batches through ``model`` now, for these layers.
        Raises ValueError when it knows none of the layers, or a layer's input width differs."""
        if not self._collected:
            self._collect(model, layers)
        elif layers:
            if not self._widths.keys() & layers.keys():
                mine = ", ".join(sorted(self._widths)[:3]) or "none"
                theirs = ", ".join(sorted(layers)[:3])
                raise ValueError("sketch_model: calibration: the Calibration was built on another model: none of the "
                                 f"layers to convert ({theirs}, ...) is among its {len(self._widths)} layers ({mine}"
                                 ", ...); build it on this model or on the one this model was copied from")
            for name, (_, width) in layers.items():
                if name in self._widths and self._widths[name] != width:
                    raise ValueError(f"sketch_model: calibration: layer {name!r} takes inputs of width {width}, but the "
                                     f"Calibration saw width {self._widths[name]} there (built on another model?)")
        return {name: self._grams[name] for name in layers if name in self._grams}

    def __len__(self) -> int:
        return len(self._batches)

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...

    def __getitem__(self, index: Union[int, slice]) -> Any:
        return self._batches[index]

    def __repr__(self) -> str:
        state = f"{len(self._grams)} Gram matrices" if self._collected else "not run yet"
        return f"Calibration({len(self._batches)} batches, {state})"


def linear_layers(model: nn.Module) -> dict[str, tuple[nn.Module, int]]:
    """Every linear map ``sketch_model`` could convert in ``model``: name → (module, d_in)."""
    layers: dict[str, tuple[nn.Module, int]] = {}
    for name, module in model.named_modules():
        spec = spec_of(module)
        if not name or spec is None:
            continue
        try:
            M, _ = read_linear(module, spec)
        except ValueError:
            continue
        layers[name] = (module, M.shape[0])
    return layers


def calibration_of(calibration: Union[Calibration, Iterable[Any]]) -> Calibration:
    """``sketch_model``'s ``calibration`` argument as a Calibration (batches: a deferred one)."""
    if isinstance(calibration, Calibration):
        return calibration
    return Calibration.deferred(_calibrate.batches_of(calibration))


def grams_for(model: nn.Module, layers: Mapping[str, tuple[nn.Module, int]],
              calibration: Union[Calibration, Sequence[Any]]) -> dict[str, Tensor]:
    """The Gram matrices of ``layers`` from a Calibration, or from a pass over plain batches."""
    if isinstance(calibration, Calibration):
        return calibration.grams_for(model, layers)
    return _calibrate.collect_grams(model, layers, calibration)


__all__ = ["Calibration"]
