"""sketchcore.torch.low_rank_activations on transformers' models converted to CoLA layers
(LLaMA, GPT-2): the gradients are those without the mode, and of the MLP-wide tensors a block
keeps without it none is kept (its gate, up, SiLU, product, GELU are all recomputed)."""
import contextlib

import pytest
import torch

from sketchcore.torch import low_rank_activations, sketch_model
from sketchcore.torch.ops import _memory_mode

transformers = pytest.importorskip("transformers")
WIDE = 96  # the MLP's width: no tensor in the models has it but the MLP's


def _llama(dtype):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=WIDE, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16,
                                      attn_implementation="sdpa")
    model = transformers.LlamaForCausalLM(config).to(dtype)
    sketch_model(model, layer="lowrank", low_rank=8, init="random", inner_activation="silu", exclude=["lm_head"])
    return model


def _gpt2(dtype):
    torch.manual_seed(1)
    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_inner=WIDE, n_layer=2, n_head=4,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config).to(dtype)
    sketch_model(model, layer="lowrank", low_rank=8, init="random", inner_activation="silu", exclude=["lm_head"])
    return model


def _gradients(model, batch, memory_mode):
    """The gradients of one training step, and the shapes of the tensors autograd kept for it."""
    packs = []

    def pack(t):
        packs.append(_memory_mode._pack(t))
        return packs[-1]

    with contextlib.ExitStack() as stack:
        if memory_mode:
            stack.enter_context(low_rank_activations())
        stack.enter_context(torch.autograd.graph.saved_tensors_hooks(pack, _memory_mode._unpack))
        loss = model(input_ids=batch, labels=batch).loss
    kept = [tuple(t.shape) for p in packs for t in _memory_mode.held_tensors(p)]
    del packs
    return torch.autograd.grad(loss, list(model.parameters())), kept


@pytest.mark.parametrize("build", [_llama, _gpt2])
@pytest.mark.parametrize("dtype,tolerance", [(torch.float64, 1e-12), (torch.float32, 2e-6)])
def test_gradients_unchanged_and_no_mlp_wide_tensor_kept(build, dtype, tolerance):
    model = build(dtype)
    batch = torch.randint(0, 64, (3, 16), generator=torch.Generator().manual_seed(2))
    want, kept_plain = _gradients(model, batch, memory_mode=False)
    got, kept = _gradients(model, batch, memory_mode=True)
    assert any(len(shape) == 3 and shape[-1] == WIDE for shape in kept_plain)
    assert not [shape for shape in kept if len(shape) == 3 and shape[-1] == WIDE]
    for g, w in zip(got, want):
        assert ((g - w).norm() / w.norm().clamp_min(1e-30)).item() < tolerance
