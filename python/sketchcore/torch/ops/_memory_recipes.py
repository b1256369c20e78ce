"""The recipes of the memory mode (``_memory_mode``): how the backward recomputes a tensor the
forward let go, and what autograd keeps in its place.

A recipe is a node of a small graph. A *layer recipe* is a ``LowRankLinear``'s output,
``act(σ(Z)·U + b)``; a *derived recipe* is an allowlisted elementwise or shape function applied to
views of other recipes and to constants (tensors that need no gradient, or leaves such as
parameters). Every recipe remembers the version of each tensor it holds, and of the tensors
its inputs hold: a tensor changed in place after the forward makes the recipe unusable, which
``_pack`` answers by keeping the tensor and ``_unpack`` by raising, as autograd does.

A recipe's value is cached while unpacks that need it are still pending (``acquire``/``release``
count them: each saved view packed with the recipe, and each derived recipe that has not yet
computed its value), so that a tensor several saved tensors derive from (a LLaMA MLP's gate,
read by the SiLU, the product and the down projection's input) is recomputed once per backward
and dropped after its last use. The cache lives on the recipes, which live on autograd's graph:
a graph freed without a backward frees them.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch import Tensor
from torch.utils._pytree import TreeSpec, tree_unflatten

from sketchcore.torch._common import TORCH_ACTIVATIONS

#: Whether a recomputed value is kept between the unpacks of one backward that need it (else
#: every unpack recomputes its whole recipe tree; a switch for measuring what the cache buys).
CACHE_ACROSS_UNPACKS = True


class Recipe:
    """A recomputable tensor: ``size``/``stride`` of its (offset 0) storage, its dtype, and the
    tensors it holds with their versions at registration (``guards``, inputs' included)."""

    def __init__(self, like: Tensor, held: list[Tensor], inputs: list[Recipe]) -> None:
        self.size, self.stride = tuple(like.size()), tuple(like.stride())
        self.dtype, self.device = like.dtype, like.device
        self.inputs = inputs
        self.guards: dict[int, tuple[Tensor, int]] = {}
        for recipe in inputs:
            self.guards.update(recipe.guards)
        for t in held:
            self.guards[id(t)] = (t, t._version)
        self.uses = 0
        self.cached: Optional[Tensor] = None
        self.holds_inputs = False

    def intact(self) -> bool:
        """Whether no tensor the recipe reads was changed in place since the forward."""
        return all(t._version == version for t, version in self.guards.values())

    def check(self) -> None:
        for t, version in self.guards.values():
            if t._version != version:
                raise RuntimeError(
                    f"low_rank_activations: a tensor that a recomputed activation reads (shape {tuple(t.shape)}, "
                    f"dtype {t.dtype}) was modified in place between the forward and the backward: expected "
                    f"version {version}, got {t._version}; leave it unchanged until the backward has run")

    def acquire(self) -> None:
        """One more pending use of the value (a saved view packed, or a derived recipe that needs it)."""
        self.uses += 1
        if self.uses == 1 and self.cached is None and not self.holds_inputs:
            self.holds_inputs = True
            for recipe in self.inputs:
                recipe.acquire()

    def release(self) -> None:
        """One pending use done: the cached value goes with the last."""
        if self.uses > 0:
            self.uses -= 1
            if self.uses == 0:
                self.cached = None

    def value(self) -> Tensor:
        """The tensor as the forward computed it (up to float rounding), laid out as it was."""
        if self.cached is not None:
            return self.cached
        with torch.no_grad():
            v = self._compute()
        if tuple(v.stride()) != self.stride or v.storage_offset() != 0 or v.dtype != self.dtype:
            v = torch.empty_strided(self.size, self.stride, dtype=self.dtype, device=v.device).copy_(v)
        if self.holds_inputs:  # the inputs were kept for this first computation only
            self.holds_inputs = False
            for recipe in self.inputs:
                recipe.release()
        if self.uses > 0 and CACHE_ACROSS_UNPACKS:
            self.cached = v
        return v

    def held_tensors(self) -> list[Tensor]:
        """The tensors the recipe keeps alive (its own and its inputs')."""
        return [t for t, _ in self.guards.values()]

    def _compute(self) -> Tensor:
        raise NotImplementedError


class LayerRecipe(Recipe):
    """A ``LowRankLinear``'s output, ``act(σ(Z)·U + b)``, from the Z its fused op saved."""

    def __init__(self, y: Tensor, z: Tensor, U: Tensor, bias: Optional[Tensor], activation: str,
                 inner_activation: str) -> None:
        super().__init__(y, [z, U] if bias is None else [z, U, bias], [])
        self.z, self.U, self.bias = z, U, bias
        self.activation, self.inner_activation = activation, inner_activation

    def _compute(self) -> Tensor:
        z = self.z
        y = TORCH_ACTIVATIONS[self.inner_activation](z) @ self.U.to(z.dtype)  # autocast ran the op on cast factors
        if self.bias is not None:
            y = y + self.bias.to(z.dtype)
        return TORCH_ACTIVATIONS[self.activation](y)


class KeptRecipe(Recipe):
    """A tensor autograd keeps anyway (saved by some node, unchanged since), as the root of derived
    recipes: holding it costs nothing that is not held already, and what is computed from it
    elementwise (a norm's normalised rows and its scaled output, autocast's copy of a layer's
    input) need not be kept beside it."""

    def __init__(self, t: Tensor) -> None:
        super().__init__(t, [t], [])
        self.tensor = t

    def _compute(self) -> Tensor:
        return self.tensor


class View:
    """An argument of a derived recipe: a view of another recipe's storage."""

    __slots__ = ("recipe", "size", "stride", "offset")

    def __init__(self, recipe: Recipe, t: Tensor) -> None:
        self.recipe, self.size, self.stride = recipe, tuple(t.size()), tuple(t.stride())
        self.offset = t.storage_offset()

    def materialize(self) -> Tensor:
        return self.recipe.value().as_strided(self.size, self.stride, self.offset)


class DerivedRecipe(Recipe):
    """``func(*args, **kwargs)`` whose tensor arguments are views of recipes or constants,
    recomputed under the autocast state of the forward."""

    def __init__(self, out: Tensor, func: Callable[..., Any], leaves: list[Any], spec: TreeSpec) -> None:
        views = [leaf for leaf in leaves if isinstance(leaf, View)]
        constants = [leaf for leaf in leaves if isinstance(leaf, Tensor)]
        super().__init__(out, constants, list({id(v.recipe): v.recipe for v in views}.values()))
        self.func, self.leaves, self.spec = func, leaves, spec
        self.device_type = out.device.type
        self.autocast = (torch.is_autocast_enabled(self.device_type), torch.get_autocast_dtype(self.device_type))

    def _compute(self) -> Tensor:
        leaves = [leaf.materialize() if isinstance(leaf, View) else leaf for leaf in self.leaves]
        args, kwargs = tree_unflatten(leaves, self.spec)
        enabled, dtype = self.autocast
        with torch.autocast(self.device_type, dtype=dtype, enabled=enabled):
            out = self.func(*args, **kwargs)
        assert isinstance(out, Tensor)
        return out


class Packed:
    """What autograd keeps of a saved view of a recipe: the recipe and where the view lies."""

    __slots__ = ("recipe", "size", "stride", "offset")

    def __init__(self, recipe: Recipe, t: Tensor) -> None:
        self.recipe, self.size, self.stride = recipe, tuple(t.size()), tuple(t.stride())
        self.offset = t.storage_offset()

    def unpack(self) -> Tensor:
        self.recipe.check()
        out = self.recipe.value().as_strided(self.size, self.stride, self.offset)
        self.recipe.release()
        return out


class Kept:
    """A saved tensor kept as it is, with its version: autograd checks none under saved-tensor
    hooks, so the unpack does (an in-place change after the forward raises, as without the mode).
    A function that saves its own output (tanh, sigmoid, exp, relu) saves it before the output is
    registered: ``adopt`` then swaps the tensor for its recipe."""

    __slots__ = ("tensor", "version", "packed")

    def __init__(self, t: Tensor) -> None:
        self.tensor: Optional[Tensor] = t
        self.version = t._version
        self.packed: Optional[Packed] = None

    def adopt(self, recipe: Recipe) -> None:
        """Keeps `recipe` in place of the tensor (a view of the storage the recipe recomputes)."""
        assert self.tensor is not None
        recipe.acquire()
        self.packed, self.tensor = Packed(recipe, self.tensor), None

    def unpack(self) -> Tensor:
        if self.packed is not None:
            return self.packed.unpack()
        assert self.tensor is not None
        if self.tensor._version != self.version:
            raise RuntimeError(
                f"low_rank_activations: a tensor saved for the backward (shape {tuple(self.tensor.shape)}, dtype "
                f"{self.tensor.dtype}) was modified in place: expected version {self.version}, got "
                f"{self.tensor._version}")
        return self.tensor
