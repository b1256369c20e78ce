"""The models bench/pretrain.py trains, one per row, all from the same LLaMA-style config and seed:

- ``dense``: ``LlamaForCausalLM`` as transformers builds it;
- ``cola_sketchcore``: every projection of the blocks (q, k, v, o, gate, up, down) replaced by
  ``LowRankLinear(rank = hidden/4, inner_activation="silu")`` through
  ``sketch_model(init="random")`` (CoLA; embeddings and lm_head stay dense);
- ``cola_sketchcore_memory``: that model trained in sketchcore's memory mode
  (``low_rank_activations``: the layers' full-width outputs recomputed from their r-wide Z);
- ``cola_torch``: the same CoLA model written in plain torch, as its paper describes it (two
  ``nn.Linear`` and a SiLU), with the very same initial factors as ``cola_sketchcore``;
- ``lowrank``: the same ranks without the inner activation (W = S·U);
- ``sklinear``: Panther's ``SKLinear`` (one term, k = hidden/4: the same learnable parameters),
  Panther's initialisation from the fresh dense weight.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from sketchcore.torch import LowRankLinear, sketch_model

ROWS = ("dense", "cola_sketchcore", "cola_torch", "cola_sketchcore_memory", "lowrank", "sklinear")
#: The recipe's defaults (bench/pretrain.py): the warm-up's share of the steps, and the gain on the
#: low-rank factors' product at initialisation.
WARMUP, INIT_GAIN = 0.1, 1.0
#: The model's layers that stay dense in every row (CoLA keeps embeddings and the output head dense).
KEEP_DENSE = ["lm_head"]


def llama_config(preset: dict[str, Any]) -> Any:
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=256, hidden_size=preset["hidden"], intermediate_size=preset["intermediate"],
                       num_hidden_layers=preset["layers"], num_attention_heads=preset["heads"],
                       num_key_value_heads=preset["heads"], max_position_embeddings=preset["length"],
                       tie_word_embeddings=False, attn_implementation="sdpa")


class TorchCoLALinear(nn.Module):
    """CoLA's layer in plain torch: ``up(silu(down(x)))``, the peer of LowRankLinear(inner_activation="silu")."""

    def __init__(self, layer: LowRankLinear) -> None:
        super().__init__()
        self.down = nn.Linear(layer.in_features, layer.rank, bias=False)
        self.up = nn.Linear(layer.rank, layer.out_features, bias=layer.bias is not None)
        with torch.no_grad():  # the same initial factors as the sketchcore layer
            self.down.weight.copy_(layer.S.t())
            self.up.weight.copy_(layer.U.t())
            if layer.bias is not None:
                self.up.bias.copy_(layer.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.up(F.silu(self.down(x)))


def _to_torch_peer(model: nn.Module) -> None:
    for name, module in list(model.named_modules()):
        if isinstance(module, LowRankLinear):
            parent_name, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent_name) if parent_name else model, child, TorchCoLALinear(module))


def _scale_factors(model: nn.Module, gain: float) -> None:
    if gain != 1.0:
        with torch.no_grad():
            for module in model.modules():
                if isinstance(module, LowRankLinear):
                    module.S.mul_(gain ** 0.5)
                    module.U.mul_(gain ** 0.5)


def build(row: str, preset: dict[str, Any], seed: int, init_gain: float = INIT_GAIN) -> nn.Module:
    """The model of `row`, its dense parts drawn from `seed` (the same in every row); the low-rank
    rows' factors each scaled by √init_gain after sketch_model draws them (their product by
    init_gain; the recipe's sensitivity)."""
    from transformers import LlamaForCausalLM
    torch.manual_seed(seed)
    model = LlamaForCausalLM(llama_config(preset))
    rank = preset["hidden"] // 4
    torch.manual_seed(seed + 1)  # the factors: the same draw for both CoLA rows and the plain low-rank one
    if row in ("cola_sketchcore", "cola_sketchcore_memory", "cola_torch"):
        sketch_model(model, layer="lowrank", low_rank=rank, init="random", inner_activation="silu", exclude=KEEP_DENSE)
        _scale_factors(model, init_gain)
        if row == "cola_torch":
            _to_torch_peer(model)
    elif row == "lowrank":
        sketch_model(model, layer="lowrank", low_rank=rank, init="random", exclude=KEEP_DENSE)
        _scale_factors(model, init_gain)
    elif row == "sklinear":
        sketch_model(model, layer="sklinear", num_terms=1, low_rank=rank, init="panther", exclude=KEEP_DENSE)
    elif row != "dense":
        raise ValueError(f"pretrain: row: expected one of {ROWS}, got {row!r}")
    return model


def learnable_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
