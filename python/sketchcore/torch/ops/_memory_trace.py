"""The memory mode's watch over elementwise and shape functions (``_memory_mode``): a
``TorchFunctionMode`` that registers the output of an allowlisted function as a derived recipe
when every tensor argument needing a gradient is (a view of) a recomputable tensor.

The allowlist holds what transformer blocks apply to projections' outputs between two layers
(activations, products and sums, the rotary embedding's slices, negation and concatenation,
views, copies and casts): functions whose output depends on nothing but their arguments. Views
need no recipe (they share the storage of what they view, which the pack looks up); a function
that is not listed leaves its output unregistered, which the backward then keeps as it is.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from sketchcore.torch.ops._memory_recipes import DerivedRecipe, Kept, Recipe, View

_T = torch.Tensor
#: Deterministic functions of their arguments alone (no randomness, no state, no in-place
#: writes): the activations, arithmetic, casts, copies and concatenations of transformer blocks.
ALLOWED: frozenset[Callable[..., Any]] = frozenset({
    F.silu, F.gelu, F.relu, F.mish, F.softplus, torch.relu, torch.tanh, torch.sigmoid, torch.exp, torch.rsqrt,
    torch.sqrt, torch.square, torch.pow, torch.neg, torch.mul, torch.add, torch.sub, torch.div, torch.cat,
    torch.reshape, torch.flatten,
    _T.relu, _T.tanh, _T.sigmoid, _T.exp, _T.rsqrt, _T.sqrt, _T.square, _T.pow, _T.__pow__, _T.neg, _T.__neg__,
    _T.mul, _T.__mul__, _T.__rmul__, _T.add, _T.__add__, _T.__radd__, _T.sub, _T.__sub__, _T.__rsub__,
    _T.div, _T.__truediv__, _T.reshape, _T.flatten, _T.contiguous, _T.clone, _T.to, _T.float, _T.half,
    _T.bfloat16, _T.double, _T.type_as,
})


class DeriveRecipes(TorchFunctionMode):
    """Registers derived recipes for the allowlisted calls made inside it (grad mode only)."""

    def __init__(self, recipe_of: Callable[[Tensor], Optional[Recipe]],
                 register: Callable[[Tensor, Recipe], None], state: Any) -> None:
        super().__init__()
        self._recipe_of, self._register, self._state = recipe_of, register, state

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: Any = (),
                           kwargs: Optional[dict[str, Any]] = None) -> Any:
        kwargs = kwargs or {}
        if func not in ALLOWED:
            return func(*args, **kwargs)
        fresh: list[Kept] = []  # what the pack keeps during the call
        self._state.fresh = fresh
        try:
            out = func(*args, **kwargs)
        finally:
            self._state.fresh = None
        if isinstance(out, Tensor) and out.requires_grad and torch.is_grad_enabled():
            recipe = self._derive(func, args, kwargs, out)
            if recipe is not None:
                _adopt_own_output(fresh, out, recipe)
        return out

    def _derive(self, func: Callable[..., Any], args: Any, kwargs: dict[str, Any], out: Tensor) -> Optional[Recipe]:
        """Registers and returns the recipe of `out`, or None where it is not recomputable."""
        if "out" in kwargs or out._base is not None or out.layout != torch.strided or out.storage_offset() != 0:
            return None  # a view (its storage's recipe covers it) or a write into a given tensor
        leaves, spec = tree_flatten((args, kwargs))
        storage = out.untyped_storage()
        recorded: list[Any] = []
        for leaf in leaves:
            if not isinstance(leaf, Tensor):
                recorded.append(leaf)
                continue
            if leaf.untyped_storage().data_ptr() == storage.data_ptr() and storage.nbytes() > 0:
                return None  # the output is its argument (a cast to the same dtype, a contiguous tensor)
            recipe = self._recipe_of(leaf)
            if recipe is not None:
                recorded.append(View(recipe, leaf))
            elif leaf.requires_grad and not leaf.is_leaf:
                return None  # computed from something not recomputable: keep the output
            elif leaf.is_inference():
                return None  # made under inference_mode: no version to guard it by, so keep the output
            else:
                recorded.append(leaf)  # a constant, or a leaf such as a parameter (version-guarded)
        if not any(isinstance(r, View) for r in recorded):
            return None
        recipe = DerivedRecipe(out, func, recorded, spec)
        self._register(out, recipe)
        return recipe


def _adopt_own_output(fresh: list[Kept], out: Tensor, recipe: Recipe) -> None:
    """Swaps for `recipe` the saved tensors of `fresh` that are `out` (saved by the function that made it)."""
    address = out.untyped_storage().data_ptr()
    for kept in fresh:
        if kept.tensor is not None and kept.tensor.untyped_storage().data_ptr() == address \
                and kept.version == out._version:
            kept.adopt(recipe)
