"""A memory mode for training with low-rank layers (CoLA-M's idea): between forward and backward
keep only the rank-wide intermediates of the ``LowRankLinear`` layers, not the full-width tensors
computed from them.

A ``LowRankLinear``'s fused op already keeps just its input x and the r-wide Z = x·S (σ and σ′ are
recomputed from Z). What else a model keeps of such a layer is its *output* y (d_out wide) and
tensors computed from it elementwise: a LLaMA MLP's SiLU keeps the gate projection's output, its
product keeps SiLU(gate) and the up projection's output, the down projection keeps the product;
attention keeps the query and key after the rotary embedding (elementwise in the projections'
outputs, with constant cos and sin) and the value states. Inside :func:`low_rank_activations`:

- each such layer's output is registered with a *layer recipe* (its Z, U, bias), recomputed
  ``act(σ(Z)·U + b)``: one rows × r × d_out GEMM;
- a ``TorchFunctionMode`` watches the calls of an allowlist of elementwise and shape functions
  (``_memory_trace``); an output whose every argument needing a gradient is (a view of) a
  recomputable tensor, the others being constants or leaves, is registered with a *derived
  recipe* (the function and its arguments);
- every tensor autograd saves that is (a view of) a registered one is packed as its recipe and
  recomputed in the backward, each recipe once per backward (``_memory_recipes``);
- every other tensor autograd saves is remembered (weakly, with its version) as a *kept root*: an
  allowlisted function of kept roots (and recipes) is derived like the others, so what an RMSNorm
  computes elementwise from its kept input (its normalised rows, its scaled output that the next
  layers save, autocast's bfloat16 copy of that) is recomputed instead of kept beside the input.
  Holding a root costs nothing: autograd keeps it anyway.

No block is checkpointed; attention and reductions (a norm's mean) are not recomputed. Anything
off the allowlist is kept as without the mode. A tensor changed in place after its registration is kept.
Between the forward and the backward, a kept tensor or a constant a recipe reads that is changed
in place makes the backward raise (for a constant, where plain autograd, which does not save it,
would not); a recomputed tensor changed in place after it was saved is rebuilt as the forward saw
it, so its gradient is the forward's (where plain autograd would raise). The recomputed
values equal the forward's up to float rounding (the layer's product is recomputed by torch's GEMM
from the same Z, the forward's by sketchcore's); derived recipes
replay the forward's function, under the forward's autocast state. The cost: the recomputed
GEMMs and elementwise passes, and a Python call per watched function in the forward.

Eager mode only (torch.compile and torch.func trace their own saved tensors); layers with
dropout in training mode are left alone (their output depends on the mask).
"""
from __future__ import annotations

import contextlib
import threading
import weakref
from typing import Any, Iterator, Optional

import torch
from torch import Tensor
from torch.multiprocessing.reductions import StorageWeakRef

from sketchcore.torch.ops._memory_recipes import Kept, KeptRecipe, LayerRecipe, Packed, Recipe
from sketchcore.torch.ops._memory_trace import DeriveRecipes

_state = threading.local()


class _Entry:
    """A registered storage: its recipe and the storage's version at registration."""

    __slots__ = ("recipe", "version")

    def __init__(self, recipe: Recipe, version: int) -> None:
        self.recipe, self.version = recipe, version


def active() -> bool:
    """Whether a low_rank_activations region is open on this thread."""
    return getattr(_state, "recipes", None) is not None


def recipe_of(t: Tensor) -> Optional[Recipe]:
    """The recipe that recomputes `t` (a view of a registered storage, unchanged since), or None."""
    recipes = getattr(_state, "recipes", None)
    if recipes is None or t.layout != torch.strided:
        return None
    key = StorageWeakRef(t.untyped_storage())  # type: ignore[no-untyped-call]
    entry: Optional[_Entry] = recipes.get(key)
    if entry is None:
        return _kept_root(key, t)
    if entry.version != t._version or entry.recipe.dtype != t.dtype:
        return None
    return entry.recipe


def _kept_root(key: Any, t: Tensor) -> Optional[Recipe]:
    """A recipe returning the saved tensor that owns `t`'s storage, if one is kept, unchanged."""
    found = getattr(_state, "kept", {}).get(key)
    if found is None:
        return None
    ref, version = found
    owner: Optional[Tensor] = ref()
    if owner is None or owner._version != version or t._version != version or owner.dtype != t.dtype:
        return None
    return KeptRecipe(owner)


def _remember_kept(t: Tensor) -> None:
    """Records a saved tensor that owns its storage (weakly: the registry must not keep it alive)."""
    kept = getattr(_state, "kept", None)
    if kept is not None and t._base is None and t.storage_offset() == 0 and t.layout == torch.strided:
        if len(kept) >= getattr(_state, "prune_kept_at", _PRUNE_FROM):
            for key in [key for key in kept if key.expired()]:
                del kept[key]
            _state.prune_kept_at = max(_PRUNE_FROM, 2 * len(kept))
        kept[StorageWeakRef(t.untyped_storage())] = (weakref.ref(t), t._version)  # type: ignore[no-untyped-call]


def register_recipe(out: Tensor, recipe: Recipe) -> None:
    """Records that `out` (a fresh output, offset 0, owning its storage) can be recomputed by `recipe`."""
    recipes = getattr(_state, "recipes", None)
    if recipes is None or out.storage_offset() != 0 or out._base is not None:
        return
    if len(recipes) >= getattr(_state, "prune_at", _PRUNE_FROM):
        _prune(recipes)
    recipes[StorageWeakRef(out.untyped_storage())] = _Entry(recipe, out._version)  # type: ignore[no-untyped-call]


#: Entries before the registry first drops those of storages that have died.
_PRUNE_FROM = 512


def _prune(recipes: dict[Any, _Entry]) -> None:
    """Drops the entries of dead storages: a region spanning many steps would otherwise keep every
    step's Z alive through them (the graph's own packed recipes do not depend on the registry)."""
    for key in [key for key in recipes if key.expired()]:
        del recipes[key]
    _state.prune_at = max(_PRUNE_FROM, 2 * len(recipes))


def register(y: Tensor, grad_fn: Any, U: Tensor, bias: Optional[Tensor], activation: str,
             inner_activation: str) -> None:
    """Records that `y`, the output of a fused op whose node is `grad_fn` (its Z the fifth saved
    tensor), can be recomputed from Z."""
    if not y.is_contiguous():
        return
    _state.peeking = True  # reading Z unpacks every saved tensor: recompute none of them now
    try:
        z = grad_fn.saved_tensors[4]
    finally:
        _state.peeking = False
    register_recipe(y, LayerRecipe(y, z, U, bias, activation, inner_activation))


def _pack(t: Tensor) -> Any:
    recipe = recipe_of(t)
    if recipe is None or not recipe.intact():
        kept = Kept(t)
        _remember_kept(t)
        fresh = getattr(_state, "fresh", None)
        if fresh is not None:  # saved inside a watched call: perhaps its output, registered next
            fresh.append(kept)
        return kept
    recipe.acquire()
    return Packed(recipe, t)


def _unpack(packed: Any) -> Tensor:
    if getattr(_state, "peeking", False):
        recipe_view = packed.packed if isinstance(packed, Kept) else packed
        if isinstance(recipe_view, Packed):  # a placeholder of the right shape, never read
            recipe = recipe_view.recipe
            return torch.zeros((), dtype=recipe.dtype, device=recipe.device).expand(recipe_view.size)
    return packed.unpack() if isinstance(packed, (Packed, Kept)) else packed


def held_tensors(packed: Any) -> list[Tensor]:
    """The tensors autograd keeps alive through what `_pack` returned (for counting bytes)."""
    if isinstance(packed, Kept):
        packed = packed.packed or packed.tensor
    if isinstance(packed, Packed):
        return packed.recipe.held_tensors()
    return [packed] if isinstance(packed, Tensor) else []


@contextlib.contextmanager
def low_rank_activations() -> Iterator[None]:
    """Runs the forward passes inside it in the memory mode (see the module): the outputs of
    ``LowRankLinear`` layers, and the tensors computed from them (or from tensors autograd keeps
    anyway, such as a norm's input) by elementwise and shape functions (activations, products,
    sums, casts, the rotary embedding, views, concatenations), that autograd saves are recomputed
    in the backward from the layers' rank-wide intermediates and the kept tensors instead of
    being kept. Gradients are those of the plain forward up to float rounding.

    Yields
    ------
    None

    Raises
    ------
    Nothing of its own in the region. The backward raises RuntimeError if a tensor a recomputed
    activation reads (a constant such as a rotary table, a factor, a saved tensor) was modified in
    place between the forward and the backward.

    Examples
    --------
    >>> import torch
    >>> from sketchcore.torch import LowRankLinear, low_rank_activations
    >>> gate, up, down = (LowRankLinear(64, 256, 16, inner_activation="silu"),
    ...                   LowRankLinear(64, 256, 16, inner_activation="silu"),
    ...                   LowRankLinear(256, 64, 16, inner_activation="silu"))
    >>> x = torch.randn(8, 64)
    >>> with low_rank_activations():
    ...     loss = down(torch.nn.functional.silu(gate(x)) * up(x)).square().sum()
    >>> loss.backward()  # the MLP's four 8 × 256 saved tensors were recomputed from two 8 × 16 Z
    >>> down.S.grad.shape
    torch.Size([256, 16])
    """
    previous = getattr(_state, "recipes", None), getattr(_state, "kept", None)
    _state.recipes, _state.prune_at, _state.kept, _state.prune_kept_at = {}, _PRUNE_FROM, {}, _PRUNE_FROM
    try:
        with torch.autograd.graph.saved_tensors_hooks(_pack, _unpack), \
                DeriveRecipes(recipe_of, register_recipe, _state):
            yield
    finally:
        _state.recipes, _state.kept = previous
