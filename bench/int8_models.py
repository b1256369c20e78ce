"""The int8 twins the LLM benchmarks compare (issue 49), built from a dense model and its low-rank
conversion (CPU, float32: torch's dynamic quantization runs there only):

- ``torch int8``: the dense model through ``torch.ao.quantization.quantize_dynamic`` (every
  ``nn.Linear`` int8, activations quantized per call) — what a CPU user would pick instead;
- ``lowrank int8``: the low-rank model through ``sketchcore.torch.quantize_`` (int8 factors), then
  torch's recipe for the dense leftovers (the ``lm_head``), which leaves our layers alone;
- ``pairs int8``: the same factors written as two ``nn.Linear`` each (x S, then · U), then
  torch's int8 on everything — what a user gets from torch alone with our factors;
- ``torchao int8``: the dense model through torchao's ``quantize_(model,
  Int8DynamicActivationInt8WeightConfig())`` (eager), torch's recommended successor to
  ``quantize_dynamic`` — present only where torchao imports.

On a CUDA device (``device_quantized_twins``) the low-rank model with int8 and fp8 factors is
compared with its bf16 self instead (torch's dynamic int8 runs on the CPU only).

``inference_rows`` measures models side by side: perplexity, bytes, inference time in rounds."""
from __future__ import annotations

import copy
import statistics
import time
from typing import Any, Callable

import torch
from torch import nn

from meters import model_bytes
import sketchcore
from sketchcore.torch import LowRankLinear, quantize_

INT8_MODELS = ("torch int8", "lowrank int8", "pairs int8", "torchao int8")
#: Every model with quantized layers: inference only, and not traced by torch.compile (the
#: quantized layers call sketchcore directly).
QUANTIZED_MODELS = (*INT8_MODELS, "lowrank fp8")


def torch_int8(model: nn.Module) -> nn.Module:
    """A copy with every ``nn.Linear`` dynamically quantized to int8 by torch."""
    return torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)  # a copy (inplace=False)


def lowrank_int8(lowrank: nn.Module) -> nn.Module:
    """A copy of a low-rank model with int8 factors (ours) and torch's int8 on the dense rest."""
    return torch_int8(quantize_(copy.deepcopy(lowrank), "int8"))


def as_linear_pair(layer: LowRankLinear) -> nn.Sequential:
    """``x S U + b`` as ``nn.Linear(in, rank, bias=False)`` then ``nn.Linear(rank, out)``."""
    first = nn.Linear(layer.in_features, layer.rank, bias=False)
    second = nn.Linear(layer.rank, layer.out_features, bias=layer.bias is not None)
    with torch.no_grad():
        first.weight.copy_(layer.S.t())
        second.weight.copy_(layer.U.t())
        if layer.bias is not None:
            second.bias.copy_(layer.bias)
    return nn.Sequential(first, second).train(layer.training)


def pairs_int8(lowrank: nn.Module) -> nn.Module:
    """A copy of a low-rank model with each LowRankLinear as two nn.Linear, all int8 by torch."""
    pairs = copy.deepcopy(lowrank)
    for name, module in list(pairs.named_modules()):
        if isinstance(module, LowRankLinear):
            if module.activation != "none" or module.inner_activation != "none":
                raise ValueError(f"pairs_int8: {name}: expected a linear LowRankLinear, got activation "
                                 f"{module.activation!r}, inner_activation {module.inner_activation!r}")
            parent, _, child = name.rpartition(".")
            setattr(pairs.get_submodule(parent) if parent else pairs, child, as_linear_pair(module))
    return torch_int8(pairs)


def torchao_int8(dense: nn.Module) -> nn.Module | None:
    """A copy through torchao's int8 dynamic activation + int8 weight config, or None (with the
    reason printed) where torchao does not import."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torchao.quantization import Int8DynamicActivationInt8WeightConfig
            from torchao.quantization import quantize_ as torchao_quantize_
    except Exception as error:  # noqa: BLE001 - any failure to import is the reason
        print(f"torchao int8: not run ({type(error).__name__}: {str(error)[:120]})")
        return None
    model = copy.deepcopy(dense)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torchao_quantize_(model, Int8DynamicActivationInt8WeightConfig())
    return model


def int8_twins(dense: nn.Module, lowrank: nn.Module) -> dict[str, nn.Module]:
    """The int8 models (torchao's only where it imports), in eval mode."""
    twins = {"torch int8": torch_int8(dense).eval(), "lowrank int8": lowrank_int8(lowrank).eval(),
             "pairs int8": pairs_int8(lowrank).eval()}
    torchao = torchao_int8(dense)
    if torchao is not None:
        twins["torchao int8"] = torchao.eval()
    return twins


def device_quantized_twins(lowrank: nn.Module, device: torch.device) -> dict[str, nn.Module]:
    """On a CUDA device: copies of the low-rank model (already there) with int8 and, on compute
    capability 8.9 or newer, fp8 factors, the dense rest left as it is — each only where its gated
    path is open (``SKETCHCORE_CUDA_UNVERIFIED``); an empty dict elsewhere."""
    if device.type != "cuda":
        return {}
    twins = {}
    configs = [("int8", "cuda_int8_factors")]
    if torch.cuda.get_device_capability(device) >= (8, 9):
        configs.append(("fp8", "cuda_fp8_factors"))
    for config, gate in configs:
        if sketchcore.gated_path_enabled(gate):
            # factors quantized from float32; the dense rest back in the model's dtype (bf16) — the
            # quantized layers keep their codes and float32 scales through .to(dtype)
            dtype = next(lowrank.parameters()).dtype
            quantized = quantize_(copy.deepcopy(lowrank).cpu().float(), config)
            twins[f"lowrank {config}"] = quantized.to(device=device, dtype=dtype).eval()
    return twins


def inference_rows(models: dict[str, nn.Module], perplexity: Callable[[nn.Module], float],
                   forward: Callable[[nn.Module], Any], rounds: int, calls: int = 3) -> list[dict[str, Any]]:
    """One row per model: validation perplexity, bytes held, and the seconds of an inference
    ``forward`` (eval mode, no autograd) — each round times every model in a rotated order (the
    median of ``calls`` calls after a warm-up), so a slow minute falls on all of them; the row
    holds the median over rounds, its [min, max], and each round's value."""
    rows = [{"model": name, "ppl": perplexity(model), "bytes": model_bytes(model)} for name, model in models.items()]
    names = list(models)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            model = models[name].eval()
            with torch.no_grad():
                forward(model)
                times = []
                for _ in range(calls):
                    begin = time.perf_counter()
                    forward(model)
                    times.append(time.perf_counter() - begin)
            seconds[name].append(statistics.median(times))
    for row in rows:
        times = seconds[row["model"]]
        row.update(forward_ms=1e3 * statistics.median(times), forward_ms_spread=[1e3 * min(times), 1e3 * max(times)],
                   forward_ms_rounds=[1e3 * t for t in times])
    return rows
