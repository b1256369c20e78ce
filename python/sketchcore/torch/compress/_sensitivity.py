"""How much each linear layer's output error moves the model's output, measured on calibration
inputs: the numbers the global allocation weighs each layer's truncation error by.

For a small error δ on layer i's output y_i, the model's output moves by J_i δ (J_i the Jacobian
of the output with respect to y_i). For a random probe g with unit-variance entries,
E_g ⟨g, J_i δ⟩² = ‖J_i δ‖², and the gradient of ⟨g, out⟩ with respect to y_i is G_i = J_iᵀ g,
so one backward pass gives every layer's G_i at once. Taking δ as uncorrelated with the
gradient's pattern (the truncation error spreads over many tokens and output directions),
‖J_i δ‖² ≈ mean(G_i²)·‖δ‖²: ``weight`` = mean(G_i²) over the probes is the squared output
error per unit of squared layer error. One probe per batch on a few batches: each mean is over
every element of the layer's output, so it is stable.

The same pass records what the int8 error estimate needs: Σ over input rows of max|x_row|² (the
per-row quantization step) and Σ‖x_row‖², and ‖x M‖² (the layer's output without bias) and the
model output's ‖out‖², all on the same rows."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import Tensor, nn

from sketchcore.torch.compress._calibrate import call_model, first_tensor

#: Calibration batches the sensitivity pass runs (one forward and one backward each).
SENSITIVITY_BATCHES = 4


@dataclass
class LayerSensitivity:
    """What the pass measured for one layer (sums over the rows of the batches it ran)."""

    weight: float = 0.0  #: mean squared gradient of ⟨g, out⟩ on the layer's output
    output_energy: float = 0.0  #: ‖y − bias‖² (the linear part of the layer's output)
    row_max_squares: float = 0.0  #: Σ_rows max|x_row|²
    row_squares: float = 0.0  #: Σ_rows ‖x_row‖²
    _gradient_squares: float = 0.0
    _gradient_elements: int = 0


@dataclass
class Sensitivities:
    """Per layer name, and the model output's energy ‖out‖² on the same rows."""

    layers: dict[str, LayerSensitivity]
    model_energy: float


def measure_sensitivities(model: nn.Module, layers: Mapping[str, nn.Module], biases: Mapping[str, Tensor | None],
                          batches: Sequence[Any], seed: int = 0) -> Sensitivities:
    """Runs up to :data:`SENSITIVITY_BATCHES` of ``batches`` through ``model`` (eval mode, no
    parameter gradients) with a Gaussian probe on its first output tensor, and returns each
    named layer's sensitivity. A layer the batches do not reach keeps weight 0."""
    stats = {name: LayerSensitivity() for name in layers}
    generator = torch.Generator().manual_seed(seed)
    handles = []
    for name, module in layers.items():
        handles.append(module.register_forward_pre_hook(_input_hook(stats[name])))
        handles.append(module.register_forward_hook(_output_hook(stats[name], biases.get(name))))
    flags = [(p, p.requires_grad) for p in model.parameters()]
    modes = [(m, m.training) for m in model.modules()]
    model_energy = 0.0
    try:
        for p, _ in flags:
            p.requires_grad_(False)
        model.eval()
        with torch.enable_grad():
            for batch in batches[:SENSITIVITY_BATCHES]:
                out = first_tensor(call_model(model, batch))
                if out is None or not out.requires_grad:
                    continue  # no tensor output, or no layer output reaches it
                probe = torch.randn(out.shape, generator=generator, dtype=torch.float64).to(out.dtype)
                model_energy += float(out.detach().double().pow(2).sum())
                (probe * out).sum().backward()
    finally:
        for handle in handles:
            handle.remove()
        for p, flag in flags:
            p.requires_grad_(flag)
        for m, mode in modes:
            m.training = mode
    for entry in stats.values():
        entry.weight = entry._gradient_squares / entry._gradient_elements if entry._gradient_elements else 0.0
    return Sensitivities(stats, model_energy)


def _input_hook(entry: LayerSensitivity) -> Callable[..., None]:
    def hook(module: nn.Module, args: tuple[Any, ...]) -> None:
        if not args or not isinstance(args[0], Tensor):
            return
        with torch.no_grad():
            rows = args[0].detach().reshape(-1, args[0].shape[-1]).double()
            entry.row_max_squares += float(rows.abs().amax(dim=1).pow(2).sum()) if rows.numel() else 0.0
            entry.row_squares += float(rows.pow(2).sum())
    return hook


def _output_hook(entry: LayerSensitivity, bias: Tensor | None) -> Callable[..., Any]:
    def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> Any:
        if not isinstance(output, Tensor) or not output.is_floating_point():
            return None
        with torch.no_grad():
            linear = output.detach().double() - (bias.detach().double() if bias is not None else 0.0)
            entry.output_energy += float(linear.pow(2).sum())
        if not output.requires_grad:
            # a leaf here (no parameter needs grad): the graph starts at it; the clone is what the
            # model goes on with, so an in-place operation downstream never touches the leaf
            output = output.requires_grad_().clone()

        def on_gradient(gradient: Tensor) -> None:
            entry._gradient_squares += float(gradient.detach().double().pow(2).sum())
            entry._gradient_elements += gradient.numel()
        output.register_hook(on_gradient)
        return output
    return hook
