"""``.weight`` of a sketched layer: its dense equivalent as a read-only, lazily computed tensor.

Torch code reads ``.weight`` for three reasons, and each gets what it needs:

* metadata (``.shape``, ``.dtype``, ``.device``, ``.requires_grad``): answered from the
  wrapper itself, without computing anything (a forward that reads ``layer.weight.device`` must not
  pay for the dense product);
* fused fast paths (``nn.TransformerEncoderLayer``, ``nn.MultiheadAttention`` in eval/no_grad):
  they check ``torch.overrides.has_torch_function`` on their weights and take their normal path,
  which calls the sketched module, when one of them overrides ``__torch_function__`` — this
  tensor does, so a converted model never silently runs the dense kernel instead of the
  sketched one;
* values (``layer.weight @ x``, ``F.linear(x, layer.weight)``, ``assert_close``): the first op
  computes W from the factors (with autograd to them when grad is enabled), and the value is
  kept on this tensor while the factors are unchanged (checked by their version counters), so
  a caller holding ``w = layer.weight`` pays once; results are plain tensors.

Writes (in-place ops, ``out=``, ``nn.init``, ``__setitem__``) raise: a dense write cannot be
represented by the factors. Assigning ``layer.weight = ...`` raises too (see ``_layer_state``).
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch import Tensor
from torch.utils._pytree import tree_flatten, tree_map

#: Tensor attributes and methods answered from the wrapper's own metadata.
_METADATA = frozenset({
    "shape", "size", "dim", "ndim", "ndimension", "dtype", "device", "requires_grad", "is_leaf", "layout",
    "is_cuda", "is_cpu", "is_meta", "is_sparse", "is_quantized", "is_mkldnn", "is_nested", "numel", "nelement",
    "stride", "is_contiguous", "element_size", "is_floating_point", "is_complex", "names", "grad", "grad_fn",
    "__len__", "get_device", "storage_offset", "_is_view", "itemsize", "nbytes", "is_inference", "is_sparse_csr",
    "is_xpu", "is_mps", "is_mtia", "is_xla", "is_ipu", "is_vulkan", "is_maia", "is_hpu", "__class__",
    "requires_grad_",  # handled in _writes when it would change the flag
})
#: The method that makes an editable dense copy, per owner (``to_linear`` when not listed).
_DENSE_COPY = {"SKConv2d": "to_conv2d"}
#: In-place dunders (their names do not end with "_").
_IN_PLACE_DUNDERS = frozenset({
    "__setitem__", "__delitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__",
    "__ipow__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__", "__imatmul__", "__set__",
})


def _name(func: Callable[..., Any]) -> str:
    """The op's name; for attribute access the attribute's (``x.shape`` arrives as the
    descriptor's ``__get__``), with ``__set__`` kept for attribute writes (``x.data = ...``)."""
    name = getattr(func, "__name__", "")
    if name in ("__get__", "__set__", "__delete__"):
        attribute = getattr(getattr(func, "__self__", None), "__name__", "")
        return attribute if name == "__get__" else f"{attribute}.{name}"
    return name


def _writes(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a call writes into a DerivedWeight (its first argument, or an ``out=``)."""
    out = kwargs.get("out")
    outs = out if isinstance(out, (tuple, list)) else (out,)
    if any(isinstance(o, DerivedWeight) for o in outs):
        return True
    # the written tensor: the first argument (nn.init passes it as the keyword ``tensor``)
    target = args[0] if args else kwargs.get("tensor", kwargs.get("input", kwargs.get("self")))
    if not isinstance(target, DerivedWeight):
        return False
    if name == "requires_grad_":  # a no-op is fine; changing the flag would be a write
        wanted = args[1] if len(args) > 1 else kwargs.get("requires_grad", True)
        return bool(wanted) != target._differentiable
    return (name in _IN_PLACE_DUNDERS or name.endswith((".__set__", ".__delete__"))
            or (name.endswith("_") and not name.startswith("__")))


class DerivedWeight(Tensor):
    """The dense equivalent of a sketched layer, computed from its factors on first use; a
    read-only view of the layer, not a parameter (see the module docstring).

    Not built by user code: ``layer.weight`` of :class:`SKLinear`, :class:`LowRankLinear` and
    :class:`SKConv2d` returns one.

    Parameters
    ----------
    owner : str
        The layer's class name, used in messages.
    shape : tuple of int
        The dense weight's shape.
    compute : callable
        Returns the dense weight from the factors.
    sources : tuple of Tensor
        The factors (their dtype, device and ``requires_grad`` are the tensor's).

    Raises
    ------
    RuntimeError
        Any write: an in-place op, ``out=``, ``nn.init``, item assignment, ``.data = ...``, or
        ``requires_grad_`` changing the flag.

    Examples
    --------
    >>> from sketchcore.torch import LowRankLinear
    >>> layer = LowRankLinear(64, 32, rank=4)
    >>> w = layer.weight  # metadata: nothing computed
    >>> type(w).__name__, w.shape, w.dtype, w.requires_grad
    ('DerivedWeight', torch.Size([32, 64]), torch.float32, True)
    >>> torch.allclose(w @ torch.ones(64), layer.to_linear().weight @ torch.ones(64))
    True
    >>> torch.nn.init.zeros_(w)
    Traceback (most recent call last):
    RuntimeError: LowRankLinear.weight: expected no write (...), got zero_(); ...
    """

    _owner: str
    _compute: Callable[[], Tensor]
    _sources: tuple[Tensor, ...]
    _value: Optional[Tensor]
    _value_key: Optional[tuple[int, ...]]
    _differentiable: bool

    @staticmethod
    def __new__(cls, owner: str, shape: tuple[int, ...], compute: Callable[[], Tensor],
                sources: tuple[Tensor, ...]) -> "DerivedWeight":
        reference = sources[0]
        self = Tensor._make_wrapper_subclass(cls, shape, dtype=reference.dtype, device=reference.device,
                                             requires_grad=any(s.requires_grad for s in sources))
        self._owner, self._compute, self._sources = owner, compute, sources
        self._value, self._value_key = None, None
        self._differentiable = any(s.requires_grad for s in sources)
        return self

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # noqa: ARG002 - torch's signature
        return f"DerivedWeight({self._owner}.weight, computed from the factors:\n{self.materialize()!r})"

    def _key(self) -> tuple[int, ...]:
        return tuple(s._version for s in self._sources) + tuple(s.data_ptr() for s in self._sources)

    def materialize(self) -> Tensor:
        """The dense weight as a plain tensor: differentiable to the factors when grad is
        enabled (computed afresh), else the value kept since the factors last changed.

        Returns
        -------
        Tensor

        Raises
        ------
        Nothing of its own (the layer's computation's errors pass through).

        Examples
        --------
        >>> from sketchcore.torch import LowRankLinear
        >>> layer = LowRankLinear(64, 32, rank=4)
        >>> type(layer.weight.materialize()).__name__
        'Tensor'
        """
        if torch.is_grad_enabled() and self._differentiable:
            return self._compute()
        key = self._key()
        if self._value is None or self._value_key != key:
            with torch.no_grad():
                self._value = self._compute()
            self._value_key = key
        return self._value.view_as(self._value)  # an alias: a caller's in-place op cannot stale the cache

    @classmethod
    def __torch_function__(cls, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (),
                           kwargs: Optional[dict[str, Any]] = None) -> Any:
        kwargs = kwargs or {}
        name = _name(func)
        if _writes(name, args, kwargs):
            owner = next(a for a in tree_flatten((args, kwargs))[0] if isinstance(a, DerivedWeight))._owner
            what = f"an assignment to .{name.split('.')[0]}" if "." in name else f"{name}()"
            raise RuntimeError(
                f"{owner}.weight: expected no write (it is the dense equivalent computed from the factors, "
                f"read-only), got {what}; change the factors (or the dense layer before converting) instead, "
                f"or use {owner}.{_DENSE_COPY.get(owner, 'to_linear')}() for an editable dense copy")
        if name in _METADATA and args and isinstance(args[0], DerivedWeight):
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs)
        args, kwargs = tree_map(lambda a: a.materialize() if isinstance(a, DerivedWeight) else a, (args, kwargs))
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: Optional[dict[str, Any]] = None) -> Any:
        # Reached only below autograd (an op that skipped __torch_function__): values only.
        args, kwargs = tree_map(lambda a: a.materialize().detach() if isinstance(a, DerivedWeight) else a,
                                (args, kwargs or {}))
        return func(*args, **kwargs)
