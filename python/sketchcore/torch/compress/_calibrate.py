"""Running calibration inputs through a model: the Gram matrix of the activations each linear
layer receives (float64, d_in × d_in per layer: statistics, never the activations), and,
after conversion, the measured output error of the converted attention modules and of the
whole model against the original modules on the same inputs."""
from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Callable, Optional

import torch
from torch import Tensor, nn


def batches_of(calibration: Iterable[Any]) -> list[Any]:
    """The calibration inputs as a list (iterated once; the inputs are kept so that the
    converted model can be measured on them too). Raises on a non-iterable or an empty one."""
    if isinstance(calibration, (Tensor, Mapping)) or not isinstance(calibration, Iterable):
        raise TypeError("sketch_model: calibration: expected an iterable of model inputs (a list of tensors, of "
                        f"tuples of positional arguments or of dicts of keyword arguments), got "
                        f"{type(calibration).__name__}" + (" (wrap a single batch in a list: [batch])"
                                                           if isinstance(calibration, (Tensor, Mapping)) else ""))
    batches = list(calibration)
    if not batches:
        raise ValueError("sketch_model: calibration: expected at least one batch of model inputs, got none")
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
    """Within the block, every call of a named layer adds RᵀR to the yielded dict, R =
    ``rows(x)`` of its input x (None: the call is skipped); layers given the same input tensor
    through the same ``rows`` function in a row share its product."""
    grams: dict[str, Tensor] = {}
    last: dict[int, tuple[Tensor, Optional[Tensor]]] = {}  # id(rows) → (the last input, its RᵀR)

    def hook_for(name: str, rows_of: RowsOf) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            x = _input_of(args, kwargs)
            if x is None:
                return
            entry = last.get(id(rows_of))
            if entry is None or entry[0] is not x:
                with torch.no_grad():
                    rows = rows_of(x.detach())
                entry = last[id(rows_of)] = (x, None if rows is None else rows.t() @ rows)
            if entry[1] is not None:
                grams[name] = grams[name] + entry[1] if name in grams else entry[1].clone()
        return hook

    handles = [module.register_forward_pre_hook(hook_for(name, rows_of), with_kwargs=True)
               for name, (module, rows_of) in layers.items()]
    try:
        yield grams
    finally:
        for handle in handles:
            handle.remove()


def collect_grams(model: nn.Module, layers: Mapping[str, tuple[nn.Module, int]], batches: list[Any]
                  ) -> dict[str, Tensor]:
    """XᵀX (float64, d_in × d_in) of the inputs each named layer (module, d_in) receives over
    all batches, rows being the positions of the leading dimensions. Layers never called are
    absent from the result. Layers given the same input tensor in a call share its product."""
    flat: dict[int, RowsOf] = {}
    for d_in in {d for _, d in layers.values()}:
        flat[d_in] = lambda x, d=d_in: x.reshape(-1, d).to(torch.float64) if x.shape[-1] == d else None
    with gram_hooks({name: (module, flat[d_in]) for name, (module, d_in) in layers.items()}) as grams:
        with evaluating(model):
            for batch in batches:
                call_model(model, batch)
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


def measure(model: nn.Module, originals: Mapping[str, nn.Module], attention: Iterable[str], batches: list[Any],
            swap: Callable[[str, nn.Module], None]) -> tuple[dict[str, float], Optional[float]]:
    """After conversion: the relative output error of each converted attention module named in
    ``attention`` (its output against the original module's on the very inputs it receives),
    and of the whole model (its first output tensor against the model with every original
    module swapped back in, batch by batch, so no outputs are stored). ``swap(name, module)``
    puts a module in place."""
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
            for batch in batches:
                new = first_tensor(call_model(model, batch))
                for name, original in originals.items():
                    swap(name, original)
                try:
                    old = first_tensor(call_model(model, batch))
                finally:
                    for name, module in converted.items():
                        swap(name, module)
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
