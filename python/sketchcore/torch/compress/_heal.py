"""Healing a compressed model: a short distillation of its sketched layers' factors against the
original model (the teacher) on unlabelled inputs — ``heal`` and its ``HealReport``."""
from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from sketchcore._progress import Progress
from sketchcore.torch._common import positive_int
from sketchcore.torch.compress._calibrate import call_model, first_tensor
from sketchcore.torch.layers._layer_state import SketchedLayer
from sketchcore.torch.compress._float_standins import float_standins

__all__ = ["HealReport", "heal"]

#: The distillation losses ``heal`` knows.
LOSSES = ("hidden", "logits", "output")
#: Which parameters ``heal`` trains.
PARAMS = ("factors", "all")
#: The default peak learning rate of AdamW, per loss (measured: see the Healing tutorial section).
#: all-MiniLM-L6-v2 at param_ratio 0.5, 400 steps on 3,187 sentences: 1e-3 healed to cosine 0.906, 3e-3 to 0.898.
DEFAULT_LR = {"hidden": 1e-3, "logits": 3e-3, "output": 3e-3}
#: The teacher's targets are kept between steps (data is cycled) while they fit in this many bytes.
CACHE_BYTES = 512 * 2**20
#: Hidden states matched by loss="hidden" on transformers models: "last" (the last layer's output) or "all"
#: (every layer's, averaged). Measured on a config-built BERT at param_ratio=0.5: "last" heals the final
#: output more at every learning rate tried (held-out error 0.172 against 0.180 at lr 1e-2).
HIDDEN_LAYERS = "last"

_WHERE = "heal"


@dataclass
class HealReport:
    """What :func:`heal` did.

    Attributes
    ----------
    losses : list of float
        The distillation loss of each step's batch (before that step's update).
    steps : int
        Optimizer steps taken.
    seconds : float
        Wall-clock time of the training loop (not of the validation passes).
    lr : float
        The peak learning rate (after warm-up; the schedule decays it to 0 by cosine).
    loss : str
        The loss: ``"hidden"``, ``"logits"`` or ``"output"``.
    trained : int
        Number of scalar parameters trained.
    validation_before, validation_after : float or None
        The mean distillation loss over the ``validation`` batches before and after healing;
        None without ``validation``.
    """

    losses: list[float] = field(repr=False)
    steps: int
    seconds: float
    lr: float
    loss: str
    trained: int
    validation_before: Optional[float] = None
    validation_after: Optional[float] = None

    def __str__(self) -> str:
        n = max(1, len(self.losses) // 10)
        first, last = sum(self.losses[:n]) / n, sum(self.losses[-n:]) / n
        rate = self.steps / self.seconds if self.seconds > 0 else float("inf")
        lines = [f"healed {self.trained:,} parameters: {self.steps} steps in {self.seconds:.1f} s "
                 f"({rate:.2f} steps/s), AdamW lr {self.lr:g}",
                 f"{self.loss} loss {first:.4g} -> {last:.4g} (mean of the first and last {n} steps)"]
        if self.validation_before is not None:
            lines.append(f"validation {self.loss} loss {self.validation_before:.4g} -> {self.validation_after:.4g}")
        return "\n".join(lines)


def _module(value: Any, name: str) -> nn.Module:
    if not isinstance(value, nn.Module):
        raise TypeError(f"{_WHERE}: {name}: expected a torch.nn.Module, got {type(value).__name__}")
    return value


def _batches(value: Any, name: str) -> list[Any]:
    if isinstance(value, (Tensor, Mapping)) or not isinstance(value, Iterable):
        hint = " (wrap a single batch in a list: [batch])" if isinstance(value, (Tensor, Mapping)) else ""
        raise TypeError(f"{_WHERE}: {name}: expected an iterable of model inputs (tensors, tuples of positional "
                        f"arguments or dicts of keyword arguments), got {type(value).__name__}{hint}")
    batches = list(value)
    if not batches:
        raise ValueError(f"{_WHERE}: {name}: expected at least one batch of model inputs, got none")
    for batch in batches:
        if not isinstance(batch, (Tensor, Mapping, tuple, list)):
            raise TypeError(f"{_WHERE}: {name}: expected each batch to be a tensor, a tuple of positional arguments "
                            f"or a dict of keyword arguments, got {type(batch).__name__}")
    return batches


def _rows(batch: Any) -> Optional[int]:
    tensors = [batch] if isinstance(batch, Tensor) else list(batch.values()) if isinstance(batch, Mapping) else batch
    sizes = [t.shape[0] for t in tensors if isinstance(t, Tensor) and t.dim() > 0]
    return sizes[0] if sizes else None


def _split(batch: Any, size: int) -> list[Any]:
    """``batch`` cut into pieces of at most ``size`` rows (dim 0 of its tensors with the batch's rows)."""
    rows = _rows(batch)
    if rows is None or rows <= size:
        return [batch]

    def piece(value: Any, start: int) -> Any:
        if isinstance(value, Tensor) and value.dim() > 0 and value.shape[0] == rows:
            return value[start:start + size]
        return value

    pieces = []
    for start in range(0, rows, size):
        if isinstance(batch, Tensor):
            pieces.append(batch[start:start + size])
        elif isinstance(batch, Mapping):
            pieces.append({key: piece(value, start) for key, value in batch.items()})
        else:
            pieces.append(type(batch)(piece(value, start) for value in batch))
    return pieces


def _is_transformers(model: nn.Module) -> bool:
    module = sys.modules.get("transformers")
    return module is not None and isinstance(model, module.PreTrainedModel)


def _call(model: nn.Module, batch: Any, hidden: bool) -> Any:
    if not hidden:
        return call_model(model, batch)
    if isinstance(batch, Mapping):
        return model(**batch, output_hidden_states=True)
    if isinstance(batch, Tensor):
        return model(batch, output_hidden_states=True)
    return model(*batch, output_hidden_states=True)


def _features(output: Any, hidden: bool) -> list[Tensor]:
    """The tensors the loss compares: the hidden states (all layers' outputs or the last), or the
    first output tensor."""
    if hidden:
        states = getattr(output, "hidden_states", None)
        if states:
            return list(states[1:] if HIDDEN_LAYERS == "all" and len(states) > 1 else states[-1:])
    tensor = first_tensor(output)
    if tensor is None:
        raise TypeError(f"{_WHERE}: model: expected an output holding a tensor, got {type(output).__name__}")
    return [tensor]


def _mask(batch: Any, like: Tensor) -> Optional[Tensor]:
    mask = batch.get("attention_mask") if isinstance(batch, Mapping) else None
    if isinstance(mask, Tensor) and mask.dim() == 2 and like.dim() >= 2 and mask.shape == like.shape[:2]:
        return mask.to(like.device, torch.float32)
    return None


def _hidden_loss(student: list[Tensor], teacher: list[Tensor], mask: Optional[Tensor]) -> Tensor:
    """Mean over the matched states of ‖s − t‖² / ‖t‖² over the (unmasked) positions."""
    total = student[0].new_zeros((), dtype=torch.float32)
    for s, t in zip(student, teacher):
        error = (s.float() - t.float()).pow(2).sum(-1)
        norm = t.float().pow(2).sum(-1)
        if mask is not None:
            error, norm = error * mask, norm * mask
        total = total + error.sum() / norm.sum().clamp_min(1e-12)
    return total / len(student)


def _logits_loss(student: list[Tensor], teacher: list[Tensor], mask: Optional[Tensor]) -> Tensor:
    """KL(teacher ‖ student) of the softmaxed logits (temperature 1), mean over (unmasked) positions."""
    s, t = student[0].float(), teacher[0].float()
    log_t = F.log_softmax(t, dim=-1)
    kl = (log_t.exp() * (log_t - F.log_softmax(s, dim=-1))).sum(-1)
    if mask is not None:
        return (kl * mask).sum() / mask.sum().clamp_min(1.0)
    return kl.mean()


def _output_loss(student: list[Tensor], teacher: list[Tensor], mask: Optional[Tensor]) -> Tensor:
    return F.mse_loss(student[0].float(), teacher[0].float())


_LOSS_FUNCTIONS: dict[str, Callable[[list[Tensor], list[Tensor], Optional[Tensor]], Tensor]] = {
    "hidden": _hidden_loss, "logits": _logits_loss, "output": _output_loss}


@contextlib.contextmanager
def _healing_state(model: nn.Module, teacher: nn.Module, trained: list[nn.Parameter]) -> Iterator[None]:
    """Both models in eval mode, only ``trained`` requiring grad, grad mode on; every training
    flag, requires_grad flag and .grad restored afterwards."""
    modes = [(module, module.training) for net in (model, teacher) for module in net.modules()]
    params = list(model.parameters()) + list(teacher.parameters())
    flags = [(p, p.requires_grad, p.grad) for p in params]
    chosen = {id(p) for p in trained}
    try:
        model.eval()
        teacher.eval()
        for p in params:
            p.requires_grad_(id(p) in chosen)
        with torch.enable_grad():
            yield
    finally:
        for p, flag, grad in flags:
            p.requires_grad_(flag)
            p.grad = grad
        for module, mode in modes:
            module.training = mode


def _check_options(steps: Any, lr: Any, loss: Any, params: Any, batch_size: Any, warmup: Any
                   ) -> tuple[int, Optional[int]]:
    """Raises heal's errors for its options; returns ``steps`` and ``batch_size`` checked."""
    steps = positive_int(steps, "steps", _WHERE)
    if lr is not None and (isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0
                           or not math.isfinite(lr)):
        raise ValueError(f"{_WHERE}: lr: expected a finite number > 0 or None, got {lr!r}")
    if loss not in LOSSES:
        raise ValueError(f"{_WHERE}: loss: expected one of {LOSSES}, got {loss!r}")
    if params not in PARAMS:
        raise ValueError(f"{_WHERE}: params: expected one of {PARAMS}, got {params!r}")
    if batch_size is not None:
        batch_size = positive_int(batch_size, "batch_size", _WHERE)
    if isinstance(warmup, bool) or not isinstance(warmup, (int, float)) or not 0 <= warmup < 1:
        raise ValueError(f"{_WHERE}: warmup: expected a fraction of the steps in [0, 1), got {warmup!r}")
    return steps, batch_size


def _trained_parameters(model: nn.Module, teacher: nn.Module, params: str) -> list[nn.Parameter]:
    """The parameters ``params`` selects (each once); raises when none is, or one is the teacher's."""
    if params == "factors":
        seen: dict[int, nn.Parameter] = {}
        for module in model.modules():
            if isinstance(module, SketchedLayer):
                seen.update((id(p), p) for p in module.parameters())
        trained = list(seen.values())
    else:
        trained = list(model.parameters())
    if not trained:
        hint = " (convert it with sketch_model first)" if params == "factors" else ""
        raise ValueError(f"{_WHERE}: params: expected {params!r} to select at least one parameter of model, "
                         f"got none{hint}")
    shared = {id(p) for p in teacher.parameters()} & {id(p) for p in trained}
    if shared:
        raise ValueError(f"{_WHERE}: teacher: expected a model that shares no trained parameter with model, got "
                         f"{len(shared)} shared (pass a copy.deepcopy of the original model)")
    return trained


class _TargetCache:
    """The teacher's targets of each batch, computed once and kept while they fit in
    :data:`CACHE_BYTES` (only when ``keep``: the data is cycled more than once)."""

    def __init__(self, compute: Callable[[Any], list[Tensor]], keep: bool) -> None:
        self.compute, self.keep = compute, keep
        self.kept: dict[int, list[Tensor]] = {}
        self.bytes = 0

    def __call__(self, index: int, batch: Any) -> list[Tensor]:
        target = self.kept.get(index)
        if target is None:
            target = self.compute(batch)
            size = sum(t.numel() * t.element_size() for t in target)
            if self.keep and self.bytes + size <= CACHE_BYTES:
                self.kept[index] = target
                self.bytes += size
        return target


def _schedule(ramp: int, steps: int) -> Callable[[int], float]:
    """The learning rate's factor at each step: linear warm-up over ``ramp`` steps, then cosine to 0."""
    def factor(step: int) -> float:
        if step < ramp:
            return (step + 1) / (ramp + 1)
        return 0.5 * (1 + math.cos(math.pi * (step - ramp) / max(1, steps - ramp)))
    return factor


def heal(model: nn.Module, teacher: nn.Module, data: Iterable[Any], *, steps: int = 200, lr: Optional[float] = None,
         loss: str = "hidden", params: str = "factors", batch_size: Optional[int] = None, warmup: float = 0.1,
         progress: bool = True, validation: Optional[Iterable[Any]] = None) -> HealReport:
    """Heals a compressed ``model`` in place by distillation against ``teacher`` (the model before
    :func:`sketch_model`): ``steps`` AdamW steps on the batches of ``data``, cycled.

    Recipe (measured on config-built BERT encoders and LLaMA decoders converted at
    ``param_ratio=0.5``; see the "Healing" section of the compression tutorial): match the last
    hidden state (``loss="hidden"``), relative squared error masked by the batch's
    ``attention_mask``; train the sketched layers' factors only; AdamW (no weight decay) with
    peak ``lr`` 1e-3 (3e-3 for the logits and output losses), linear warm-up over the first ``warmup`` fraction of the steps then cosine
    decay to 0, gradients clipped at norm 1.0; a few hundred steps.

    A quantized model heals too: its 8-bit layers (inference only) are replaced for the duration
    by float layers computing their dequantized maps — low-rank ones trained, full-rank
    :class:`Int8Linear` ones frozen — and the low-rank ones are quantized again afterwards, in
    their format, from the trained factors (so ``sketch_model(..., quantize="int8")`` then
    ``heal`` heals before the final quantization).

    Both models run in **eval mode** (no dropout) with grad enabled for the student; the teacher runs under ``no_grad`` and its parameters never change.
    Every module's training flag, every parameter's ``requires_grad`` flag and ``.grad`` are
    restored afterwards. While the data is cycled, the teacher's targets are computed once per
    batch and kept while they fit in 512 MiB.

    Parameters
    ----------
    model : nn.Module
        The converted model, trained in place.
    teacher : nn.Module
        The original model (e.g. a ``copy.deepcopy`` taken before conversion); not ``model``.
    data : iterable
        Model inputs as for ``sketch_model(calibration=...)``: tensors, tuples of positional
        arguments or dicts of keyword arguments (tokenizer outputs), cycled for ``steps`` steps.
    steps : int
        Optimizer steps (≥ 1).
    lr : float, optional
        Peak AdamW learning rate (> 0); None: 1e-3 for ``"hidden"``, 3e-3 for the others (the
        relative losses below make it scale free; on a real 384-wide encoder 1e-3 healed better than
        3e-3, while on tiny models 1e-2 healed slightly faster than 3e-3 and 1e-3 clearly slower).
    loss : {"hidden", "logits", "output"}
        ``"hidden"``: transformers models are called with ``output_hidden_states=True`` and their
        last hidden state is matched by ‖s − t‖²/‖t‖² over the positions the ``attention_mask``
        keeps (matching every layer's state as well healed the final output less in our
        measurements); other models by the same relative error of their first output tensor. ``"logits"``: KL(teacher ‖ model) of the
        softmaxed logits (causal LMs; temperature 1), averaged over unmasked positions.
        ``"output"``: the mean squared error of the first output tensor (not scale free).
    params : {"factors", "all"}
        ``"factors"``: only the parameters of sketchcore's layers (LowRankLinear's S, U and bias;
        SKLinear's S1s, S2s and bias; …) are trained, everything else frozen; ``"all"``: every
        parameter of ``model``.
    batch_size : int, optional
        Cut each batch of ``data`` (and of ``validation``) into pieces of at most this many rows
        (dim 0 of its tensors); None: the batches as given.
    warmup : float
        Fraction of ``steps`` of linear warm-up, in [0, 1).
    progress : bool
        Show a progress bar on stderr.
    validation : iterable, optional
        Held-out inputs: the report then gives the mean loss on them before and after healing.

    Returns
    -------
    HealReport

    Raises
    ------
    TypeError
        ``model`` or ``teacher`` is not an ``nn.Module``; ``data`` or ``validation`` is not an
        iterable of model inputs.
    ValueError
        ``model is teacher``; ``data`` or ``validation`` empty; ``steps`` or ``batch_size`` not an
        integer ≥ 1; ``lr`` not a number > 0; ``warmup`` outside [0, 1); an unknown ``loss`` or
        ``params`` (the message lists the valid ones); no trainable parameter (no sketched layer: convert
        the model first); a trained parameter shared with the teacher.

    Examples
    --------
    >>> import copy
    >>> from sketchcore.torch import sketch_model
    >>> _ = torch.manual_seed(0)
    >>> model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32))
    >>> teacher = copy.deepcopy(model)
    >>> _ = sketch_model(model, param_ratio=0.5)
    >>> data = [torch.randn(64, 32) for _ in range(4)]
    >>> report = heal(model, teacher, data, steps=50, progress=False, validation=[torch.randn(64, 32)])
    >>> report.validation_after < report.validation_before
    True
    >>> heal(model, teacher, data, loss="mse")
    Traceback (most recent call last):
    ValueError: heal: loss: expected one of ('hidden', 'logits', 'output'), got 'mse'
    """
    _module(model, "model")
    _module(teacher, "teacher")
    if model is teacher:
        raise ValueError(f"{_WHERE}: teacher: expected the original model (e.g. a copy.deepcopy taken before "
                         "sketch_model), got the model being healed itself")
    steps, batch_size = _check_options(steps, lr, loss, params, batch_size, warmup)
    batches = _batches(data, "data")
    held_out = _batches(validation, "validation") if validation is not None else None
    if batch_size is not None:
        batches = [piece for batch in batches for piece in _split(batch, batch_size)]
        held_out = held_out and [piece for batch in held_out for piece in _split(batch, batch_size)]

    with float_standins(model):  # 8-bit layers heal as float ones, quantized again after
        trained = _trained_parameters(model, teacher, params)
        hidden = loss == "hidden" and _is_transformers(model) and _is_transformers(teacher)
        loss_of = _LOSS_FUNCTIONS[loss]
        rate = float(lr) if lr is not None else DEFAULT_LR[loss]

        def targets(batch: Any) -> list[Tensor]:
            with torch.no_grad():
                return [t.detach() for t in _features(_call(teacher, batch, hidden), hidden)]

        def distance(batch: Any, target: list[Tensor]) -> Tensor:
            student = _features(_call(model, batch, hidden), hidden)
            return loss_of(student, target, _mask(batch, target[0]))

        def evaluate(inputs: list[Any]) -> float:
            with torch.no_grad():
                return sum(float(distance(batch, targets(batch))) for batch in inputs) / len(inputs)

        optimizer = torch.optim.AdamW(trained, lr=rate, weight_decay=0.0)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _schedule(int(round(warmup * steps)), steps))
        cached = _TargetCache(targets, keep=len(batches) < steps)
        losses: list[float] = []
        with _healing_state(model, teacher, trained):
            before = evaluate(held_out) if held_out is not None else None
            bar = Progress(steps, "heal") if progress else None
            start = time.perf_counter()
            for step in range(steps):
                batch = batches[step % len(batches)]
                value = distance(batch, cached(step % len(batches), batch))
                optimizer.zero_grad(set_to_none=True)
                value.backward()
                torch.nn.utils.clip_grad_norm_(trained, 1.0)
                optimizer.step()
                scheduler.step()
                losses.append(float(value.detach()))
                if bar is not None:
                    bar.step(f"loss {losses[-1]:.4g}")
            seconds = time.perf_counter() - start
            optimizer.zero_grad(set_to_none=True)
            after = evaluate(held_out) if held_out is not None else None
        return HealReport(losses=losses, steps=steps, seconds=seconds, lr=rate, loss=loss,
                          trained=sum(p.numel() for p in trained), validation_before=before, validation_after=after)
