"""``sketch_model(..., allocation="global")``: one budget for all the linear layers, spent where it
lowers the model's output error most (as SVD-LLM V2 does with each layer's truncation loss, here
also weighted by how much each layer's error reaches the model's output).

For each calibrated layer i the whitened spectrum s̃ (``_whitened``) gives the relative output
error of every rank, rel_i(r) = Σ_{j>r} s̃_j² / Σ s̃_j²; the sensitivity pass (``_sensitivity``)
gives its weight w_i and the energy E_i = ‖x M‖² of its output on the same rows, so that keeping
rank r is predicted to add w_i·E_i·rel_i(r) to ‖Δout‖². int8 adds the quantization error
q_i: the weight's, tr(Dᵀ G D)/tr(Mᵀ G M) with D = M − deq(q8(M)) (exact, from the Gram matrix),
plus the input rows' (per-row step s = max|x|/127, uniform error of variance s²/12, so
Σ_rows s²/12 · ‖M‖_F² against E_i); a low-rank int8 layer quantizes two products, counted as
2·q_i on what the rank keeps. :func:`_allocate.allocate` then picks each layer's option."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor, nn

from sketchcore import _ranks
from sketchcore.torch.compress import _whitened
from sketchcore.torch.compress._allocate import Option, allocate
from sketchcore.torch.compress._sensitivity import LayerSensitivity, measure_sensitivities

#: A change that lowers the model's squared relative output error by no more than this is not
#: worth its cost (a relative error of 1e-5): the budget is a bound, not a target.
NEGLIGIBLE = 1e-10
#: The int8 step: codes in [−127, 127].
_INT8_MAX = 127.0


@dataclass(frozen=True)
class Choice:
    """A layer's allocation: the option, its whitened factors' directions (reused to build the
    layer) and its predicted share of the model's relative output error, √(error / ‖out‖²)."""

    option: Option
    Vt: Tensor
    predicted_error: float


@dataclass(frozen=True)
class Allocation:
    """The choices by layer name, the budget's unit ("parameters" or "bytes"), the budget, what
    the choices spend, and the predicted relative output error of the whole model."""

    choices: dict[str, Choice]
    unit: str
    budget: int
    spent: int
    predicted_error: float


def allocate_layers(model: nn.Module, layers: Mapping[str, tuple[nn.Module, Tensor, Optional[Tensor]]],
                    grams: Mapping[str, Tensor], batches: Sequence[Any], *, param_ratio: Optional[float],
                    bytes_ratio: Optional[float], quantize: Optional[str]) -> Allocation:
    """The global allocation of the calibrated ``layers`` (name → (module, M = Wᵀ, bias)); layers
    without a Gram matrix are not part of it. The budget is ``param_ratio`` of their weights'
    parameters, or ``bytes_ratio`` of their float32 bytes (then with ``quantize="int8"`` the
    options are int8: full rank or low rank, besides the dense layer)."""
    names = [name for name in layers if name in grams]
    by_bytes = bytes_ratio is not None
    int8 = by_bytes and quantize == "int8"
    sensitivities = measure_sensitivities(model, {n: layers[n][0] for n in names}, {n: layers[n][2] for n in names},
                                          batches)
    options: dict[str, list[Option]] = {}
    directions: dict[str, Tensor] = {}
    for name in names:
        _, M, _ = layers[name]
        s, Vt = _whitened.whitened_svd(M, grams[name])
        directions[name] = Vt
        scale = sensitivities.layers[name].weight * sensitivities.layers[name].output_energy
        q = _int8_error(M, grams[name], sensitivities.layers[name]) if int8 else 0.0
        options[name] = _options(M.shape[0], M.shape[1], (s * s).tolist(), scale, q, by_bytes, int8)
    dense = sum(layers[n][1].numel() for n in names)
    budget = int(math.floor((bytes_ratio * 4 * dense) if by_bytes else (param_ratio or 0.0) * dense))
    energy = sensitivities.model_energy
    try:
        chosen = allocate(options, budget, negligible=NEGLIGIBLE * energy)
    except ValueError as error:
        given = f"bytes_ratio={bytes_ratio}" if by_bytes else f"param_ratio={param_ratio}"
        raise ValueError(f"sketch_model: {given}: the budget of {budget} {'bytes' if by_bytes else 'parameters'} is "
                         f"below every calibrated layer at its smallest option ({error})") from None
    choices = {name: Choice(option, directions[name], _share(option.error, energy)) for name, option in chosen.items()}
    total = sum(option.error for option in chosen.values())
    return Allocation(choices, "bytes" if by_bytes else "parameters", budget,
                      sum(option.cost for option in chosen.values()), _share(total, energy))


def _share(error: float, energy: float) -> float:
    return math.sqrt(error / energy) if energy > 0 else math.sqrt(error)


def _options(n_in: int, n_out: int, energies: list[float], scale: float, q: float, by_bytes: bool,
             int8: bool) -> list[Option]:
    """Dense, then each aligned rank that stores fewer numbers than dense: float factors, or
    int8 ones (and the full-rank int8 weight) when ``int8``. Costs in parameters, or bytes."""
    dense = n_in * n_out
    relative = [e * e for e in _ranks.truncation_errors(energies)]  # rel(r) = Σ_{j≥r} e_j / Σ e_j
    options = [Option("dense", 0, 4 * dense if by_bytes else dense, 0.0)]
    if int8:
        options.append(Option("int8", 0, dense + 4 * n_out, scale * q))
    for rank in _candidate_ranks(min(n_in, n_out)):
        size = rank * (n_in + n_out)
        if size >= dense:
            break
        kept = relative[min(rank, len(relative) - 1)]
        if int8:
            options.append(Option("lowrank-int8", rank, size + 4 * (rank + n_out), scale * (kept + 2 * q * (1 - kept))))
        else:
            options.append(Option("lowrank", rank, 4 * size if by_bytes else size, scale * kept))
    return options


def _candidate_ranks(limit: int) -> list[int]:
    """The ranks the rule picks (:func:`sketchcore._ranks.aligned_ranks`) and, for a budget too
    small for them, every rank below 16 (as ``param_ratio`` alone gives a tiny budget)."""
    return sorted(set(range(1, min(limit, _ranks.SMALL_GRANULE - 1) + 1)) | set(_ranks.aligned_ranks(limit)))


def _int8_error(M: Tensor, gram: Tensor, sensitivity: LayerSensitivity) -> float:
    """The relative squared output error of the layer in int8: the weight's per-column
    quantization (exact, from the Gram matrix) plus the input rows' (their expected error)."""
    M64 = M.detach().to(torch.float64)
    step = M64.abs().amax(dim=0) / _INT8_MAX
    step = torch.where(step > 0, step, torch.ones_like(step))
    D = M64 - torch.clamp(torch.round(M64 / step), -_INT8_MAX, _INT8_MAX) * step
    G = gram.to(torch.float64)
    total = float((M64 * (G @ M64)).sum())
    weight = float((D * (G @ D)).sum()) / total if total > 0 else 0.0
    rows = (sensitivity.row_max_squares / (12 * _INT8_MAX ** 2)) * float(M64.pow(2).sum())
    activations = rows / sensitivity.output_energy if sensitivity.output_energy > 0 else 0.0
    return weight + activations
