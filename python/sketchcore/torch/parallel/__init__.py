"""Tensor parallelism for sketched layers: ``ParallelStyle``\\ s for
``torch.distributed.tensor.parallel.parallelize_module`` and a LLaMA plan.

A sketched layer ``y = act(scale · Σ_t σ(x S_t) U_t + b)`` can be sharded three ways; each style
takes ``LowRankLinear`` (with or without an inner activation σ) and ``SKLinear``, and the first two
also ``nn.Linear`` (handed to torch's own style of the same name). For an input of n rows,
r = T · rank the intermediate's width:

* :class:`ColwiseParallel` shards the output side (U and the bias by d_out), S replicated.
  Input replicated, output ``Shard(-1)``. Every rank computes the intermediate x S whole (n × d_in
  × r FLOPs more than a dense shard would). Forward: no communication. Backward: one all-reduce of
  the intermediate's gradient (n × r), after which dx and dS are whole on every rank; torch's
  dense column-parallel layer all-reduces dx (n × d_in) instead: r/d_in of its bytes.
* :class:`RowwiseParallel` shards the input side (S by d_in), U and the bias replicated. Input
  ``Shard(-1)``, output replicated. Forward: one all-reduce of the n × r intermediate x S (before
  σ), then every rank computes the second product; backward: nothing. A dense row-parallel layer
  all-reduces n × d_out instead: r/d_out of its bytes.
* :class:`RankParallel` shards the rank (S by columns, U by rows): Megatron's column-then-row
  pair inside one layer, no redundant compute. Input and output replicated. Forward: one
  all-reduce of n × d_out; backward: one of dx (n × d_in). No output activation (it would act on
  partial sums); σ is elementwise on the sharded intermediate, so it is fine.

Where the collective sits between the layer's two products (column and row styles), each rank
runs them as two torch GEMMs with the inner activation between; RankParallel runs sketchcore's
fused operator on its shards. The arguments ``input_layouts``, ``output_layouts`` and
``use_local_output`` are torch's. Bad
plans raise in ``parallelize_module``: a module the style cannot shard (TypeError), a mesh size
that does not divide the sharded size, dropout > 0, an activation under RankParallel
(ValueError). The factors become DTensors, so ``fully_shard`` (FSDP2) composes over another mesh
dimension and ``torch.distributed.checkpoint`` saves and reshards them.

Examples
--------
>>> from sketchcore.torch.parallel import ColwiseParallel, RowwiseParallel
>>> ColwiseParallel()
ColwiseParallel(input_layouts=(Replicate(),), output_layouts=(Shard(dim=-1),), use_local_output=True)
"""
from __future__ import annotations


from torch import nn
from torch.distributed.tensor.parallel import ParallelStyle

from sketchcore.torch.parallel._comm import Collective, CollectiveLog
from sketchcore.torch.parallel._styles import ColwiseParallel, RankParallel, RowwiseParallel
from sketchcore.torch.parallel import _dtensor_rules  # noqa: F401 - registers the operators' DTensor rules

__all__ = ["Collective", "CollectiveLog", "ColwiseParallel", "RankParallel", "RowwiseParallel", "llama_plan"]

_COLUMN = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj")
_ROW = ("self_attn.o_proj", "mlp.down_proj")


def llama_plan(model: nn.Module) -> dict[str, ParallelStyle]:
    """The usual tensor-parallel plan of a (sketched) LLaMA: q/k/v/gate/up column-parallel, o/down
    row-parallel, everything else replicated; attention shards are whole heads (a mesh size that
    does not divide the heads raises in ``parallelize_module``).

    Parameters
    ----------
    model : nn.Module
        A ``LlamaForCausalLM`` or ``LlamaModel`` (transformers), its linear layers dense or
        converted to sketched ones.

    Returns
    -------
    dict
        Module name → style, for ``parallelize_module(model, tp_mesh, plan)``.

    Raises
    ------
    ValueError
        ``model`` has no decoder layer with these projections.

    Examples
    --------
    >>> llama_plan(nn.Linear(4, 4))
    Traceback (most recent call last):
    ValueError: llama_plan: model: expected a LLaMA with self_attn.q_proj, ... in its decoder layers, got Linear
    """
    head_dim = getattr(getattr(model, "config", None), "head_dim", None) or 1
    plan: dict[str, ParallelStyle] = {}
    for name, module in model.named_modules():
        for suffix in _COLUMN + _ROW:
            if name == suffix or name.endswith("." + suffix):
                style = ColwiseParallel() if suffix in _COLUMN else RowwiseParallel()
                if suffix.startswith("self_attn"):
                    style.shard_multiple = head_dim  # whole heads per shard
                plan[name] = style
    if not plan:
        raise ValueError(f"llama_plan: model: expected a LLaMA with {', '.join(_COLUMN + _ROW)} in its decoder "
                         f"layers, got {type(model).__name__}")
    return plan

