"""Running calibration inputs through a model: the Gram matrix of the activations each linear
layer receives (float64, d_in × d_in per layer: statistics, never the activations), and,
after conversion, the measured output error of the converted attention modules and of the
whole model against the original modules on the same inputs."""
from __future__ import annotations

import contextlib
import contextvars
import itertools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Callable, Optional

import torch
from torch import Tensor, nn


def batches_of(calibration: Iterable[Any], what: str = "sketch_model: calibration") -> list[Any]:
    """The calibration inputs as a list (iterated once; the inputs are kept so that the
    converted model can be measured on them too). Raises on a non-iterable or an empty one;
    ``what`` names the argument in the messages."""
    if isinstance(calibration, (Tensor, Mapping)) or not isinstance(calibration, Iterable):
        raise TypeError(f"{what}: expected an iterable of model inputs (a list of tensors, of "
                        f"tuples of positional arguments or of dicts of keyword arguments), got "
                        f"{type(calibration).__name__}" + (" (wrap a single batch in a list: [batch])"
                                                           if isinstance(calibration, (Tensor, Mapping)) else ""))
    batches = list(calibration)
    if not batches:
        raise ValueError(f"{what}: expected at least one batch of model inputs, got none")
    return batches


def call_model(model: nn.Module, batch: Any) -> Any:
    """model(batch), model(*batch) or model(**batch) for a tensor, a tuple/list or a dict."""
    if isinstance(batch, Tensor):
        return model(batch)
    if isinstance(batch, Mapping):
        return model(**batch)
    if isinstance(batch, (tuple, list)):
        return model(*batch)
    raise TypeError("sketch_model: calibration: expected each batch to be a tensor, a tuple of positional "
                    f"arguments or a dict of keyword arguments, got {type(batch).__name__}")


@contextlib.contextmanager
def evaluating(model: nn.Module) -> Iterator[None]:
    """model.eval() and no_grad for the duration, each module's training flag restored after."""
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        for module, mode in modes:
            module.training = mode


def _input_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Optional[Tensor]:
    if args and isinstance(args[0], Tensor):
        return args[0]
    for value in kwargs.values():
        if isinstance(value, Tensor):
            return value
    return None


RowsOf = Callable[[Tensor], Optional[Tensor]]


@contextlib.contextmanager
def gram_hooks(layers: Mapping[str, tuple[nn.Module, RowsOf]]) -> Iterator[dict[str, Tensor]]:
    """Within the block, every call of a named layer adds RᵀR to the yielded dict (float64), R =
    ``rows(x)`` of its input x (None: the call is skipped). Layers given the same input tensor
    through the same ``rows`` function in a row share its product, and layers that received the
    same inputs in every call so far (q, k and v; gate and up) share one accumulated tensor: the
    dict maps their names to the same object (treat it as read-only). The product is computed in
    the rows' dtype (float32 rows: a float32 GEMM, half the float64 cost) and summed across calls
    in float64."""
    grams: dict[str, Tensor] = {}
    last: dict[int, tuple[Tensor, Optional[Tensor], int]] = {}  # id(rows) → (last input, its RᵀR, serial)
    serials = itertools.count(1)
    state: dict[str, int] = {}  # layer → the key of its accumulator (the sequence of products it received)
    after: dict[tuple[int, int], int] = {}  # (key, product serial) → the key of the sum
    sums: dict[int, Tensor] = {}  # key → accumulated tensor, while some layer holds it
    holders: dict[int, int] = {}

    def hook_for(name: str, rows_of: RowsOf) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            x = _input_of(args, kwargs)
            if x is None:
                return
            entry = last.get(id(rows_of))
            if entry is None or entry[0] is not x:
                with torch.no_grad():
                    rows = rows_of(x.detach())
                entry = last[id(rows_of)] = (x, None if rows is None else rows.t() @ rows, next(serials))
            product, serial = entry[1], entry[2]
            if product is None:
                return
            key = state.get(name, 0)
            new = after.get((key, serial))
            if new is None:
                new = after[(key, serial)] = next(serials)
                with torch.no_grad():
                    if key:
                        sums[new] = sums[key] + product.to(torch.float64)
                    else:
                        sums[new] = product.to(torch.float64, copy=True)
            holders[new] = holders.get(new, 0) + 1
            if key:
                holders[key] -= 1
                if not holders[key]:
                    del holders[key], sums[key]
            state[name] = new
            grams[name] = sums[new]
        return hook

    handles = [module.register_forward_pre_hook(hook_for(name, rows_of), with_kwargs=True)
               for name, (module, rows_of) in layers.items()]
    try:
        yield grams
    finally:
        for handle in handles:
            handle.remove()


#: The positions of the batch being run that hold tokens (a boolean (batch, length) tensor from its
#: ``attention_mask``), or None: padding positions carry no data, so their rows stay out of the Grams.
_TOKEN_POSITIONS: contextvars.ContextVar[Optional[Tensor]] = contextvars.ContextVar("token_positions", default=None)


def token_positions(batch: Any) -> Optional[Tensor]:
    """The non-padding positions of a batch of keyword arguments with a 2-D 0/1 ``attention_mask``
    (the transformers convention), as a boolean tensor; None otherwise (every position counts)."""
    mask = batch.get("attention_mask") if isinstance(batch, Mapping) else None
    if not isinstance(mask, Tensor) or mask.dim() != 2 or mask.is_floating_point() and not bool(
            ((mask == 0) | (mask == 1)).all()):
        return None
    positions = mask != 0
    return None if bool(positions.all()) else positions


def rows_for(d_in: int) -> RowsOf:
    """The rows of a linear layer's input of width ``d_in`` (None for another width): float64 for
    float64 inputs, float32 otherwise (the Gram product's dtype; the sums are float64). Inside
    :func:`collect_grams`, an input laid out as the batch's attention mask keeps only the rows of
    its tokens."""
    def rows_of(x: Tensor) -> Optional[Tensor]:
        if x.shape[-1] != d_in:
            return None
        positions = _TOKEN_POSITIONS.get()
        if positions is not None and tuple(x.shape[:-1]) == tuple(positions.shape):
            rows = x[positions.to(x.device)]
        else:
            rows = x.reshape(-1, d_in)
        return rows if rows.dtype in (torch.float64, torch.float32) else rows.to(torch.float32)
    return rows_of


def collect_grams(model: nn.Module, layers: Mapping[str, tuple[nn.Module, int]], batches: Iterable[Any],
                  outputs: Optional[Callable[[Any], None]] = None) -> dict[str, Tensor]:
    """XᵀX (float64, d_in × d_in) of the inputs each named layer (module, d_in) receives over
    all batches, rows being the positions of the leading dimensions (only the tokens' positions
    where a batch's ``attention_mask`` marks padding). Layers never called are
    absent from the result. Layers given the same input tensor in every call share one tensor.
    ``outputs``, when given, receives the model's output on each batch in turn."""
    flat = {d_in: rows_for(d_in) for d_in in {d for _, d in layers.values()}}
    with gram_hooks({name: (module, flat[d_in]) for name, (module, d_in) in layers.items()}) as grams:
        with evaluating(model):
            for batch in batches:
                token = _TOKEN_POSITIONS.set(token_positions(batch))
                try:
                    output = call_model(model, batch)
                finally:
                    _TOKEN_POSITIONS.reset(token)
                if outputs is not None:
                    outputs(output)
    return grams


def first_tensor(output: Any) -> Optional[Tensor]:
    """The tensor a model's output leads with: itself, ``.logits`` (transformers), the first
    tensor of a mapping or a sequence; None if there is none."""
    if isinstance(output, Tensor):
        return output
    logits = getattr(output, "logits", None)
    if isinstance(logits, Tensor):
        return logits
    values = output.values() if isinstance(output, Mapping) else output if isinstance(output, (tuple, list)) else ()
    for value in values:
        found = first_tensor(value)
        if found is not None:
            return found
    return None


def _reference(model: nn.Module, batch: Any, originals: Mapping[str, nn.Module], converted: Mapping[str, nn.Module],
               swap: Callable[[str, nn.Module], None]) -> Optional[Tensor]:
    """The model's first output tensor on ``batch`` with the original modules swapped back in."""
    for name, original in originals.items():
        swap(name, original)
    try:
        return first_tensor(call_model(model, batch))
    finally:
        for name, module in converted.items():
            swap(name, module)


class _Relative:
    """Accumulates ‖a − b‖² and ‖b‖² over batches, in float64."""

    def __init__(self) -> None:
        self.error = 0.0
        self.total = 0.0

    def add(self, approximation: Tensor, exact: Tensor) -> None:
        a, b = approximation.detach().to(torch.float64), exact.detach().to(torch.float64)
        self.error += float(torch.linalg.vector_norm(a - b) ** 2)
        self.total += float(torch.linalg.vector_norm(b) ** 2)

    def value(self) -> float:
        return math.sqrt(self.error / self.total) if self.total > 0 else math.sqrt(self.error)


def measure(model: nn.Module, originals: Mapping[str, nn.Module], attention: Iterable[str], batches: Sequence[Any],
            swap: Callable[[str, nn.Module], None]) -> tuple[dict[str, float], Optional[float]]:
    """After conversion: the relative output error of each converted attention module named in
    ``attention`` (its output against the original module's on the very inputs it receives),
    and of the whole model (its first output tensor against the model with every original
    module swapped back in, batch by batch, so no outputs are stored). ``swap(name, module)``
    puts a module in place. When ``batches`` is a ``Calibration`` that kept the original model's
    outputs (its ``reference_outputs()``, from its own pass over them), those are the reference
    and the original modules are not run again: one pass over the batches instead of two."""
    kept = getattr(batches, "reference_outputs", None)  # duck-typed: _calibration builds on this module
    references: Optional[Sequence[Optional[Tensor]]] = kept() if callable(kept) else None
    per_layer = {name: _Relative() for name in attention}
    model_error = _Relative()
    converted = {name: model.get_submodule(name) for name in originals}
    seen_tensor = True

    def hook_for(name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
            exact = first_tensor(originals[name](*args, **kwargs))
            approximate = first_tensor(output)
            if exact is not None and approximate is not None:
                per_layer[name].add(approximate, exact)
        return hook

    handles = [converted[name].register_forward_hook(hook_for(name), with_kwargs=True) for name in per_layer]
    modes = [(module, module.training) for original in originals.values() for module in original.modules()]
    for original in originals.values():
        original.eval()  # swapped into the model in eval mode, as the converted modules run
    try:
        with evaluating(model):
            for index, batch in enumerate(batches):
                new = first_tensor(call_model(model, batch))
                old = references[index] if references is not None else None
                if new is not None and (old is None or old.shape != new.shape or old.dtype != new.dtype):
                    old = _reference(model, batch, originals, converted, swap)
                if new is None or old is None:
                    seen_tensor = False
                else:
                    model_error.add(new, old)
    finally:
        for handle in handles:
            handle.remove()
        for module, mode in modes:
            module.training = mode
    return {name: acc.value() for name, acc in per_layer.items()}, (model_error.value() if seen_tensor else None)
