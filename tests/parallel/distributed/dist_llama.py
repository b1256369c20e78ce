"""A tiny LLaMA (transformers) with its projections sketched, for the distributed checks:
LowRankLinear (with and without an inner activation) and SKLinear layers."""
from __future__ import annotations

import torch
import transformers
from torch import nn

from sketchcore.torch import LowRankLinear, SKLinear

VOCAB, HIDDEN, INTERMEDIATE, HEADS = 64, 32, 64, 4


def _lowrank(linear: nn.Linear, **extra) -> LowRankLinear:
    return LowRankLinear.from_linear(linear, rank=8, **extra)


def _inner_silu(linear: nn.Linear) -> nn.Module:
    """A CoLA layer (trained from scratch: no conversion of the dense weight)."""
    return LowRankLinear(linear.in_features, linear.out_features, 8, bias=linear.bias is not None,
                         inner_activation="silu")


#: Which layer each projection becomes.
_CONVERT = {"q_proj": _lowrank, "k_proj": lambda l: SKLinear.from_linear(l, 1, 4), "v_proj": _lowrank,
            "o_proj": lambda l: SKLinear.from_linear(l, 2, 4), "gate_proj": _inner_silu, "up_proj": _lowrank,
            "down_proj": _inner_silu}


def sketched_llama(seed: int = 0) -> nn.Module:
    """The same model on every process for a given seed (float32)."""
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
                                      num_hidden_layers=2, num_attention_heads=HEADS, num_key_value_heads=HEADS,
                                      max_position_embeddings=32, attn_implementation="eager")
    model = transformers.LlamaForCausalLM(config)
    for layer in model.model.layers:
        for parent in (layer.self_attn, layer.mlp):
            for name, child in list(parent.named_children()):
                if name in _CONVERT:
                    setattr(parent, name, _CONVERT[name](child))
    return model


def tokens(batch: int, seed: int = 1, length: int = 6) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def loss_of(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return model(input_ids=ids, labels=ids).loss
