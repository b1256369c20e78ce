"""What each layer can become (Panther's layer-type mapping), each candidate's size and, from a
singular spectrum, its error; built by conversion's own code."""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

import torch
from torch import nn

from sketchcore._ranks import aligned_ranks, factored_size, largest_saving_rank, truncation_errors
from sketchcore.torch import LowRankLinear, RandMultiHeadAttention, SKConv2d, SKLinear, make_performer
from sketchcore.torch._common import positive_int
from sketchcore.torch.compress import _convert_linear, _whitened
from sketchcore.tuner._params import grid

#: Panther's LAYER_TYPE_MAPPING (documented on docs/api/tuner.md).
LAYER_TYPE_MAPPING: dict[type, dict[str, Any]] = {
    nn.Linear: {"class": SKLinear, "class_path": "sketchcore.torch.SKLinear", "params": ["num_terms", "low_rank"],
                "auto": LowRankLinear, "auto_params": ["rank"]},
    nn.Conv2d: {"class": SKConv2d, "class_path": "sketchcore.torch.SKConv2d", "params": ["num_terms", "low_rank"]},
    nn.MultiheadAttention: {"class": RandMultiHeadAttention, "class_path": "sketchcore.torch.RandMultiHeadAttention",
                            "params": ["num_random_features", "kernel_fn"]},
}


def get_sketched_class(layer_type: type) -> type:
    """``LAYER_TYPE_MAPPING[layer_type]["class"]`` (Panther's function); ValueError
    ``"get_sketched_class: layer_type: expected one of ['Linear', 'Conv2d', 'MultiheadAttention'],
    got ..."`` for another type."""
    if layer_type not in LAYER_TYPE_MAPPING:
        raise ValueError(f"get_sketched_class: layer_type: expected one of {[k.__name__ for k in LAYER_TYPE_MAPPING]}, "
                         f"got {getattr(layer_type, '__name__', repr(layer_type))}")
    sketched: type = LAYER_TYPE_MAPPING[layer_type]["class"]
    return sketched


@dataclass
class Candidate:
    """One setting of one layer: its parameters, the numbers it stores (parameters + buffers),
    its relative error at initialisation (of the weight, or of the outputs on captured inputs;
    None where no spectrum applies), how to build it, and the name of the class it builds."""

    params: dict[str, Any]
    size: int
    error: Optional[float]
    build: Callable[[], nn.Module]
    kind: str = ""


def stored(module: nn.Module) -> int:
    """Numbers a module stores: parameters and buffers (an SKLinear's fixed sketches count)."""
    return sum(t.numel() for t in itertools.chain(module.parameters(), module.buffers()))


def _supported(layer: nn.Module, name: str) -> dict[str, Any]:
    for kind, entry in LAYER_TYPE_MAPPING.items():
        if type(layer) is kind:
            return entry
    raise TypeError(f"SKAutoTuner: layer {name!r}: expected one of {[k.__name__ for k in LAYER_TYPE_MAPPING]}, "
                    f"got {type(layer).__name__}")


class _Curve:
    """The error of every rank of a layer M (fan-in × fan-out), and for a Linear with ``gram`` the
    whitened factors that reach it (the formulas: ``DEVNOTES.md``)."""

    def __init__(self, M: torch.Tensor, gram: Optional[torch.Tensor], whiten: bool) -> None:
        M64 = M.detach().to("cpu", torch.float64)
        self.Vt: Optional[torch.Tensor] = None
        if gram is None:
            energies = torch.linalg.svdvals(M64) ** 2
        elif whiten:
            s, self.Vt = _whitened.whitened_svd(M64, gram.to("cpu"))
            energies = s * s
        else:
            A, s, _ = torch.linalg.svd(M64, full_matrices=False)
            energies = s * s * torch.einsum("ij,ik,kj->j", A, gram.to("cpu", torch.float64), A)
        self.errors = truncation_errors(energies.tolist())

    def error(self, rank: int) -> float:
        return self.errors[min(rank, len(self.errors) - 1)]


def _grid(params: Mapping[str, Any], allowed: list[str], name: str, kind: str) -> list[dict[str, Any]]:
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(f"SKAutoTuner: layer {name!r} ({kind}): params: expected keys among {allowed}, got {unknown}")
    return grid(params, "SKAutoTuner: params: {name}: a continuous Float has no finite set of layer sizes; "
                        "expected a list, Categorical, Int or a Float with step")


def candidates(layer: nn.Module, name: str, params: Any, copy_weights: bool,
               gram: Optional[torch.Tensor] = None) -> list[Candidate]:
    """The candidates for ``layer`` under ``params``, smallest first ("auto": only those storing
    fewer numbers than the layer). ``gram``: XᵀX of its inputs (patches), for output-error curves."""
    entry = _supported(layer, name)
    dense = stored(layer)
    if isinstance(layer, nn.MultiheadAttention):
        return _attention(layer, name, params, copy_weights)
    if isinstance(layer, nn.Linear):
        M = layer.weight.detach().t()
        bias = layer.bias is not None
        if params == "auto":  # ranks the hardware likes (sketchcore._ranks) among those that save numbers
            settings = [{"rank": r} for r in aligned_ranks(largest_saving_rank(dense, sum(M.shape), bias * M.shape[1],
                                                                                min(M.shape)))]
        else:
            settings = _grid(params, entry["params"] + ["rank"], name, "Linear")
    else:
        assert isinstance(layer, nn.Conv2d)
        if layer.groups != 1 or layer.padding_mode != "zeros":
            raise ValueError(f"SKAutoTuner: layer {name!r}: expected a Conv2d with groups=1 and zero padding, got "
                             f"groups={layer.groups}, padding_mode={layer.padding_mode!r}")
        M = layer.weight.detach().reshape(layer.out_channels, -1).t()
        bias = layer.bias is not None
        if params == "auto":
            settings = [{"num_terms": 1, "low_rank": k}
                        for k in aligned_ranks(largest_saving_rank(dense, 2 * sum(M.shape), bias * M.shape[1],
                                                                   min(M.shape) // 2))]
        else:
            settings = _grid(params, entry["params"], name, "Conv2d")
    curve = _Curve(M, gram, whiten=isinstance(layer, nn.Linear)) if copy_weights else None
    found = []
    for setting in settings:
        rank, size = _rank_and_size(setting, M.shape, bias, name)
        if size >= dense and params == "auto":
            continue
        error = curve.error(rank) if curve is not None else None
        kind = "SKConv2d" if isinstance(layer, nn.Conv2d) else "LowRankLinear" if "rank" in setting else "SKLinear"
        build = _builder(layer, setting, copy_weights, curve.Vt if curve is not None else None)
        found.append(Candidate(setting, size, error, build, kind))
    return sorted(found, key=lambda c: (c.size, c.error if c.error is not None else 0.0))


def auto_space(layer: nn.Module, name: str) -> Optional[dict[str, Any]]:
    """What ``params="auto"`` searches for ``layer`` as an explicit space (None when no setting
    stores fewer numbers); ranks are those the GPU kernels like (``sketchcore._ranks``)."""
    found = candidates(layer, name, "auto", copy_weights=False)
    if not found:
        return None
    if isinstance(layer, nn.Linear):
        return {"rank": sorted(c.params["rank"] for c in found)}
    if isinstance(layer, nn.Conv2d):
        return {"num_terms": [1], "low_rank": sorted(c.params["low_rank"] for c in found)}
    return {"num_random_features": [c.params["num_random_features"] for c in found], "kernel_fn": ["softmax"]}


def _positive(setting: Mapping[str, Any], key: str, name: str) -> int:
    return positive_int(setting[key], key, f"SKAutoTuner: layer {name!r}: params")


def _rank_and_size(setting: Mapping[str, Any], shape: tuple[int, ...], bias: bool, name: str) -> tuple[int, int]:
    """The rank a setting reaches and the numbers it stores (M is fan-in × fan-out)."""
    n_in, n_out = shape
    if "rank" in setting:
        if set(setting) != {"rank"}:
            raise ValueError(f"SKAutoTuner: layer {name!r}: params: expected 'rank' alone (LowRankLinear) or "
                             f"'num_terms' and 'low_rank' (SKLinear), got {sorted(setting)}")
        rank = _positive(setting, "rank", name)
        if rank > min(shape):
            raise ValueError(f"SKAutoTuner: layer {name!r}: params: rank: expected at most min(in, out) = "
                             f"{min(shape)}, got {rank}")
        return rank, factored_size(n_in, n_out, rank, bias)
    for key in ("num_terms", "low_rank"):
        if key not in setting:
            raise ValueError(f"SKAutoTuner: layer {name!r}: params: expected both 'num_terms' and 'low_rank', got "
                             f"{sorted(setting)}")
    rank = 2 * _positive(setting, "num_terms", name) * _positive(setting, "low_rank", name)
    return rank, factored_size(n_in, n_out, rank, bias)  # learnable factors + fixed sketches, same total


def _builder(layer: nn.Module, setting: Mapping[str, Any], copy_weights: bool,
             Vt: Optional[torch.Tensor]) -> Callable[[], nn.Module]:
    """Builds the setting from the trained layer by conversion's code (``Vt``: whitened output
    directions, None for the weight's SVD), or fresh."""
    setting = dict(setting)

    def build() -> nn.Module:
        if isinstance(layer, nn.Linear):
            weight, bias = layer.weight, layer.bias
            if copy_weights:
                kind, rank, terms = (("lowrank", setting["rank"], None) if "rank" in setting
                                     else ("sklinear", setting["low_rank"], setting["num_terms"]))
                return _convert_linear.build(weight.detach().t(), None if bias is None else bias.detach(), kind, rank,
                                             terms, "svd", None if Vt is None else Vt.to(weight.device), weight.dtype,
                                             weight.device, {})
            if "rank" in setting:
                return LowRankLinear(layer.in_features, layer.out_features, setting["rank"], bias is not None,
                                     dtype=weight.dtype, device=weight.device)
            return SKLinear(layer.in_features, layer.out_features, setting["num_terms"], setting["low_rank"],
                            bias=bias is not None, dtype=weight.dtype, device=weight.device, init="linear")
        assert isinstance(layer, nn.Conv2d)
        if copy_weights:
            return SKConv2d.fromTorch(layer, setting["num_terms"], setting["low_rank"], init="svd")
        return SKConv2d(layer.in_channels, layer.out_channels, layer.kernel_size, layer.stride, layer.padding,
                        layer.bias is not None, setting["num_terms"], setting["low_rank"], dtype=layer.weight.dtype,
                        device=layer.weight.device, dilation=layer.dilation)
    return build


def _attention(layer: nn.MultiheadAttention, name: str, params: Any, copy_weights: bool) -> list[Candidate]:
    """Performer attention keeps the projections (no size saving): candidates are ordered by
    the number of random features, i.e. by cost."""
    head_dim = layer.embed_dim // layer.num_heads
    if params == "auto":
        counts = sorted({max(1, head_dim // 2), head_dim, 2 * head_dim, 4 * head_dim, 8 * head_dim})
        settings = [{"num_random_features": m, "kernel_fn": "softmax"} for m in counts]
    else:
        settings = _grid(params, LAYER_TYPE_MAPPING[nn.MultiheadAttention]["params"], name, "MultiheadAttention")
        for setting in settings:
            setting.setdefault("kernel_fn", "softmax")
            _positive(setting, "num_random_features", name)
    found = []
    for setting in settings:
        def build(setting: dict[str, Any] = setting) -> nn.Module:
            performer = make_performer(layer, setting["num_random_features"], setting["kernel_fn"])
            if not copy_weights:
                fresh = RandMultiHeadAttention(layer.embed_dim, layer.num_heads, setting["num_random_features"],
                                               layer.dropout, layer.in_proj_bias is not None, setting["kernel_fn"],
                                               dtype=layer.in_proj_weight.dtype, device=layer.in_proj_weight.device)
                fresh.batch_first = layer.batch_first
                return fresh
            return performer
        size = stored(layer) + setting["num_random_features"] * head_dim
        found.append(Candidate(setting, size, None, build, "RandMultiHeadAttention"))
    return sorted(found, key=lambda c: c.params["num_random_features"])
