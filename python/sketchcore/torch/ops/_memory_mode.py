"""A memory mode for training with low-rank layers (CoLA-M's idea): between forward and backward
keep only the rank-wide intermediates of the ``LowRankLinear`` layers, not their full-width
outputs.

A ``LowRankLinear``'s fused op already keeps just its input x and the r-wide Z = x·S (σ and σ′ are
recomputed from Z). What else a model keeps of such a layer is its *output* y (d_out wide),
saved by the operations that read it: the SiLU and the product of a LLaMA MLP's gate and up
projections, the attention's value states, the next layer of a plain stack. Inside
:func:`low_rank_activations`, every tensor autograd saves that is (a view of) such an output is
replaced by a recipe — the layer's own Z, its factor U and bias — and recomputed when the backward
needs it, ``y = act(σ(Z)·U + b)``: one rows × r × d_out GEMM per saved output, the same product the
fused backward already recomputes for an outer activation. Nothing else is recomputed (no block
is checkpointed). The recomputed values equal the forward's up to float rounding (the product is
recomputed by torch's GEMM from the same Z, the forward's by sketchcore's: about 1e-7 relative in
float32).

Eager mode only (torch.compile and torch.func trace their own saved tensors); layers with
dropout in training mode are left alone (their output depends on the mask).
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Any, Iterator, Optional

import torch
from torch import Tensor
from torch.multiprocessing.reductions import StorageWeakRef

from sketchcore.torch._common import TORCH_ACTIVATIONS

_state = threading.local()


@dataclass
class _Recipe:
    z: Tensor
    U: Tensor
    bias: Optional[Tensor]
    activation: str
    inner_activation: str

    def output(self) -> Tensor:
        with torch.no_grad():
            y = TORCH_ACTIVATIONS[self.inner_activation](self.z) @ self.U
            if self.bias is not None:
                y = y + self.bias
            return TORCH_ACTIVATIONS[self.activation](y)


@dataclass
class _Packed:
    """A saved view of a recomputable output: the recipe and where the view lies in it."""

    recipe: _Recipe
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int


def active() -> bool:
    """Whether a low_rank_activations region is open on this thread."""
    return getattr(_state, "recipes", None) is not None


def register(y: Tensor, z: Tensor, U: Tensor, bias: Optional[Tensor], activation: str, inner_activation: str) -> None:
    """Records that `y` (a fresh, contiguous output) can be recomputed from the layer's Z."""
    recipes = getattr(_state, "recipes", None)
    if recipes is None or y.storage_offset() != 0 or not y.is_contiguous():
        return
    recipes[StorageWeakRef(y.untyped_storage())] = _Recipe(z, U, bias, activation, inner_activation)


def _pack(t: Tensor) -> Any:
    recipes = getattr(_state, "recipes", None)
    if not recipes or t.layout != torch.strided:
        return t
    key = StorageWeakRef(t.untyped_storage())
    recipe = recipes.get(key)
    if recipe is None or recipe.z.dtype != t.dtype:
        return t
    return _Packed(recipe, tuple(t.size()), tuple(t.stride()), t.storage_offset())


def _unpack(packed: Any) -> Tensor:
    if not isinstance(packed, _Packed):
        return packed
    return packed.recipe.output().as_strided(packed.size, packed.stride, packed.offset)


@contextlib.contextmanager
def low_rank_activations() -> Iterator[None]:
    """Runs the forward passes inside it in the memory mode (see the module): the outputs of
    ``LowRankLinear`` layers that autograd saves are recomputed in the backward from the layers'
    rank-wide intermediates instead of being kept.

    Yields
    ------
    None

    Raises
    ------
    Nothing of its own.

    Examples
    --------
    >>> import torch
    >>> from sketchcore.torch import LowRankLinear, low_rank_activations
    >>> model = torch.nn.Sequential(LowRankLinear(64, 256, 16, inner_activation="silu"), torch.nn.SiLU(),
    ...                             LowRankLinear(256, 64, 16, inner_activation="silu"))
    >>> x = torch.randn(8, 64)
    >>> with low_rank_activations():
    ...     loss = model(x).square().sum()
    >>> loss.backward()  # the SiLU's saved input, 8 × 256, was recomputed from an 8 × 16 Z
    >>> model[0].S.grad.shape
    torch.Size([64, 16])
    """
    previous = getattr(_state, "recipes", None)
    _state.recipes = {}
    try:
        with torch.autograd.graph.saved_tensors_hooks(_pack, _unpack):
            yield
    finally:
        _state.recipes = previous
