"""Tensor-parallel styles for sketched layers (``torch.distributed.tensor.parallel.ParallelStyle``).

Each style shards the layer's factors as DTensors on a 1-D mesh (so that FSDP2 can shard them
further over another mesh dimension and ``torch.distributed.checkpoint`` saves and reshards them)
and replaces the layer's forward by its product on the local shards, with the collectives of
``_collectives`` written out where the math needs them. What each style communicates per
call, for an input of n rows (CommDebugMode counts exactly these):

=====================  ==========================  =========================  ============================
style                  shards                      forward                    backward
=====================  ==========================  =========================  ============================
ColwiseParallel        U, bias by d_out            nothing                    all-reduce n × r (dσ(x S))
RowwiseParallel        S by d_in                   all-reduce n × r (x S)     nothing
RankParallel           S and U by the rank         all-reduce n × d_out       all-reduce n × d_in (dx)
=====================  ==========================  =========================  ============================

(r = T · rank, the width of the intermediate.) ``nn.Linear`` goes to torch's own styles.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor, nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel as _TorchColwise
from torch.distributed.tensor.parallel import ParallelStyle
from torch.distributed.tensor.parallel import RowwiseParallel as _TorchRowwise
from torch.distributed.tensor.placement_types import Placement

from sketchcore.torch.parallel import _layers
from sketchcore.torch.parallel._collectives import reduce_gradient, reduce_value
from sketchcore.torch.parallel._layers import LayerLayout


class _SketchedStyle(ParallelStyle):
    """The parts every style shares: checks, partition, input and output layouts."""

    _default_input: Placement = Replicate()
    _default_output: Placement = Replicate()
    _desired_input: Placement = Replicate()  # the input layout the local product needs
    _natural_output: Placement = Replicate()  # the output layout the local product gives
    _torch_style: Optional[type] = None  # torch's style for nn.Linear

    def __init__(self, *, input_layouts: Optional[Placement] = None, output_layouts: Optional[Placement] = None,
                 use_local_output: bool = True) -> None:
        super().__init__()
        self.input_layouts = (input_layouts or self._default_input,)
        self.output_layouts = (output_layouts or self._default_output,)
        self.use_local_output = use_local_output
        #: Shards of d_out (ColwiseParallel) or d_in (RowwiseParallel) must be whole multiples of
        #: this (attention heads: llama_plan sets it to the head dimension).
        self.shard_multiple = 1

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(input_layouts={self.input_layouts}, output_layouts={self.output_layouts}, "
                f"use_local_output={self.use_local_output})")

    # -- parallelize_module's entry point ---------------------------------------------------------
    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        where = type(self).__name__
        if device_mesh.ndim != 1:
            raise ValueError(f"{where}: device_mesh: expected a 1-D (tensor-parallel) mesh, got {device_mesh.ndim} "
                             f"dimensions {tuple(device_mesh.mesh_dim_names or ())}; pass mesh['tp'] of a 2-D mesh")
        layout = _layers.layout_of(module)
        if layout is None:
            if isinstance(module, nn.Linear) and self._torch_style is not None:
                self._check_shards(module, device_mesh.size())
                style = self._torch_style(input_layouts=self.input_layouts[0], output_layouts=self.output_layouts[0],
                                          use_local_output=self.use_local_output)
                style.src_data_rank = self.src_data_rank
                return style._apply(module, device_mesh)
            kinds = ", ".join(k.__name__ for k in _layers.SKETCHED_LAYERS)
            linear = ", nn.Linear" if self._torch_style is not None else ""
            raise TypeError(f"{where}: module: expected one of {kinds}{linear}, got {type(module).__name__}")
        self._check(module, layout, device_mesh.size())
        self._check_shards(module, device_mesh.size())
        for owner, factor, placement in self._placements(module, layout):
            _distribute(owner, factor, placement, device_mesh, self.src_data_rank)
        module.forward = _ParallelForward(self, module, device_mesh)  # type: ignore[method-assign]
        return module

    def _check(self, module: nn.Module, layout: LayerLayout, size: int) -> None:
        where = f"{type(self).__name__}: {type(module).__name__}"
        if getattr(module, "dropout", 0.0) > 0:
            raise ValueError(f"{where}: dropout: expected 0 under tensor parallelism (the masks of the shards would "
                             f"repeat each other), got {module.dropout}")

    def _check_shards(self, module: nn.Module, size: int) -> None:
        """Raises where the mesh size does not divide the sharded feature dimension."""

    def _placements(self, module: nn.Module, layout: LayerLayout) -> list[tuple[nn.Module, str, Placement]]:
        raise NotImplementedError

    @staticmethod
    def _divisible(where: str, what: str, value: int, size: int, multiple: int = 1) -> None:
        if value % (size * multiple):
            unit = f" × {multiple}" if multiple > 1 else ""
            raise ValueError(f"{where}: {what}: expected a multiple of the mesh size {size}{unit}, got {value}")

    # -- the replaced forward ---------------------------------------------------------------------
    def _local_input(self, x: Any, mesh: DeviceMesh) -> Tensor:
        desired = (self._desired_input,)
        if isinstance(x, DTensor):
            if tuple(x.placements) != desired:
                x = x.redistribute(mesh, desired)
            return x.to_local()
        if self.input_layouts == desired:
            return x
        return DTensor.from_local(x, mesh, self.input_layouts, run_check=False).redistribute(mesh, desired).to_local()

    def _output(self, y: Tensor, mesh: DeviceMesh) -> Any:
        natural = (self._natural_output,)
        if self.output_layouts == natural and self.use_local_output:
            return y
        out = DTensor.from_local(y, mesh, natural, run_check=False)
        if self.output_layouts != natural:
            out = out.redistribute(mesh, self.output_layouts)
        return out.to_local() if self.use_local_output else out

    def local_forward(self, module: nn.Module, x: Tensor, group: Any) -> Tensor:
        """The layer's output on this rank from the local input (in ``_desired_input``)."""
        raise NotImplementedError


class _ParallelForward:
    """A parallelized layer's forward: the style's product on local shards."""

    def __init__(self, style: _SketchedStyle, module: nn.Module, mesh: DeviceMesh) -> None:
        self.style, self.mesh = style, mesh
        self.module_ref = module  # the module owns this object: one reference cycle, collected with it

    def __call__(self, x: Any) -> Any:
        local = self.style._local_input(x, self.mesh)
        y = self.style.local_forward(self.module_ref, local, self.mesh.get_group())
        return self.style._output(y, self.mesh)


def _distribute(module: nn.Module, name: str, placement: Placement, mesh: DeviceMesh, src: Optional[int]) -> None:
    """Replaces parameter or buffer ``name`` of ``module`` by a DTensor with ``placement``."""
    if name in module._parameters:
        param = module._parameters[name]
        if param is None:
            return
        dist_param = nn.Parameter(distribute_tensor(param.detach(), mesh, [placement], src_data_rank=src),
                                  requires_grad=param.requires_grad)
        module.register_parameter(name, dist_param)
    else:
        module._buffers[name] = distribute_tensor(module._buffers[name], mesh, [placement], src_data_rank=src)


def _local(module: nn.Module, name: str) -> Optional[Tensor]:
    """The local shard of a factor or the bias. A buffer (SKLinear's fixed sketches) takes the
    dtype of the layer's parameters, which FSDP2's mixed precision casts and buffers it does not."""
    if name in module._parameters:
        t = module._parameters[name]
    else:
        t = module._buffers[name]
        dtype = next(iter(module._parameters.values())).dtype
        if t is not None and t.dtype != dtype:
            t = t.to(dtype)
    return t.to_local() if isinstance(t, DTensor) else t


class ColwiseParallel(_SketchedStyle):
    """Column parallel: shards the output side of a sketched layer (U, the bias, by d_out); S stays
    replicated and every rank computes the rank-wide intermediate x S whole. Input replicated,
    output ``Shard(-1)``. Forward: no communication; backward: one all-reduce of the gradient of
    σ(x S), n × r (torch's dense layer: dx, n × d_in). ``nn.Linear`` goes to torch's
    ``ColwiseParallel``.

    Parameters
    ----------
    input_layouts : Placement, optional
        The layout of the module's input (a plain tensor is taken to have it): default ``Replicate()``.
        It is redistributed to ``Replicate()`` (DTensor's collectives) if it differs.
    output_layouts : Placement, optional
        The layout wanted for the output: default ``Shard(-1)``; redistributed from ``Shard(-1)`` if it differs.
    use_local_output : bool
        Return the local tensor (default) rather than a DTensor.

    Attributes
    ----------
    shard_multiple : int
        Each rank's share of d_out must be a multiple of it (whole attention heads; :func:`llama_plan` sets it to the head dimension). 1 by default.

    Raises
    ------
    TypeError
        In ``parallelize_module``: a module that is not LowRankLinear, SKLinear or nn.Linear.
    ValueError
        In ``parallelize_module``: a mesh that is not 1-D; out_features not a multiple of the mesh size × ``shard_multiple``; dropout > 0.

    Examples
    --------
    >>> ColwiseParallel(use_local_output=False).use_local_output
    False
    """

    _default_output = Shard(-1)
    _natural_output = Shard(-1)
    _torch_style = _TorchColwise

    def _check_shards(self, module: nn.Module, size: int) -> None:
        self._divisible(f"ColwiseParallel: {type(module).__name__}", "out_features", module.out_features, size,
                        self.shard_multiple)

    def _placements(self, module: nn.Module, layout: LayerLayout) -> list[tuple[nn.Module, str, Placement]]:
        plan: list[tuple[nn.Module, str, Placement]] = [(module, f.name, Replicate()) for f in layout.input_side]
        plan += [(module, f.name, Shard(f.outer)) for f in layout.output_side]
        return plan + [(module, "bias", Shard(0))]

    def local_forward(self, module: nn.Module, x: Tensor, group: Any) -> Tensor:
        layout = _layers.layout_of(module)
        factors = {f.name: _local(module, f.name) for f in (*layout.input_side, *layout.output_side)}
        A, B, scale = _layers.packed_factors(module, factors)
        # z = x A is computed whole on every rank; the gradient of σ(z), a partial sum over the
        # output shards (n × r), is the one tensor all-reduced, so dx and dA come out whole
        z = torch.matmul(x, A)
        return _layers.second_product(module, z, B, scale, _local(module, "bias"), reduce_gradient, group)


class RowwiseParallel(_SketchedStyle):
    """Row parallel: shards the input side of a sketched layer (S by d_in); U and the bias stay
    replicated. Input ``Shard(-1)``, output replicated. Forward: one all-reduce of the n × r
    intermediate x S, before the inner activation σ, then every rank computes σ(z) U whole;
    backward: no communication (torch's dense layer: forward all-reduce of n × d_out).
    ``nn.Linear`` goes to torch's ``RowwiseParallel``.

    Parameters
    ----------
    input_layouts : Placement, optional
        The layout of the module's input (a plain tensor is taken to have it): default ``Shard(-1)``.
        It is redistributed to ``Shard(-1)`` (DTensor's collectives) if it differs.
    output_layouts : Placement, optional
        The layout wanted for the output: default ``Replicate()``; redistributed from ``Replicate()`` if it differs.
    use_local_output : bool
        Return the local tensor (default) rather than a DTensor.

    Attributes
    ----------
    shard_multiple : int
        Each rank's share of d_in must be a multiple of it (whole attention heads). 1 by default.

    Raises
    ------
    TypeError
        In ``parallelize_module``: a module that is not LowRankLinear, SKLinear or nn.Linear.
    ValueError
        In ``parallelize_module``: a mesh that is not 1-D; in_features not a multiple of the mesh size × ``shard_multiple``; dropout > 0.

    Examples
    --------
    >>> RowwiseParallel().input_layouts
    (Shard(dim=-1),)
    """

    _default_input = Shard(-1)
    _desired_input = Shard(-1)
    _torch_style = _TorchRowwise

    def _check_shards(self, module: nn.Module, size: int) -> None:
        self._divisible(f"RowwiseParallel: {type(module).__name__}", "in_features", module.in_features, size,
                        self.shard_multiple)

    def _placements(self, module: nn.Module, layout: LayerLayout) -> list[tuple[nn.Module, str, Placement]]:
        plan: list[tuple[nn.Module, str, Placement]] = [(module, f.name, Shard(f.outer)) for f in layout.input_side]
        plan += [(module, f.name, Replicate()) for f in layout.output_side]
        return plan + [(module, "bias", Replicate())]

    def local_forward(self, module: nn.Module, x: Tensor, group: Any) -> Tensor:
        layout = _layers.layout_of(module)
        factors = {f.name: _local(module, f.name) for f in (*layout.input_side, *layout.output_side)}
        A, B, scale = _layers.packed_factors(module, factors)
        z = reduce_value(torch.matmul(x, A), group)  # the n × r intermediate: reduced before σ
        return _layers.second_product(module, z, B, scale, _local(module, "bias"))


class RankParallel(_SketchedStyle):
    """Rank parallel: shards the rank of a sketched layer (S by columns, U by rows; SKLinear's
    ``low_rank`` in every term), Megatron's column-then-row pair inside one layer. Input and
    output replicated. Forward: one all-reduce of the n × d_out partial sums (the bias is added
    after it); backward: one all-reduce of dx (n × d_in). No redundant compute. The layer must have
    no output activation (it would act on partial sums); the inner activation σ is elementwise on
    the sharded intermediate and runs as is. Not for ``nn.Linear`` (it has no rank).

    Parameters
    ----------
    input_layouts : Placement, optional
        The layout of the module's input (a plain tensor is taken to have it): default ``Replicate()``.
        It is redistributed to ``Replicate()`` (DTensor's collectives) if it differs.
    output_layouts : Placement, optional
        The layout wanted for the output: default ``Replicate()``; redistributed from ``Replicate()`` if it differs.
    use_local_output : bool
        Return the local tensor (default) rather than a DTensor.

    Attributes
    ----------
    shard_multiple : int
        Unused (the rank is sharded).

    Raises
    ------
    TypeError
        In ``parallelize_module``: a module that is not LowRankLinear or SKLinear.
    ValueError
        In ``parallelize_module``: a mesh that is not 1-D; a rank (``rank``, ``low_rank``) not a multiple of the mesh size; dropout > 0; an output activation.

    Examples
    --------
    >>> RankParallel().output_layouts
    (Replicate(),)
    """

    def _check(self, module: nn.Module, layout: LayerLayout, size: int) -> None:
        super()._check(module, layout, size)
        where = f"RankParallel: {type(module).__name__}"
        self._divisible(where, layout.rank_name, _layers.rank_of(module), size)
        if module.activation != "none":
            raise ValueError(f"{where}: activation: expected 'none' (the output is a sum over ranks; an activation "
                             f"would apply to each partial sum), got {module.activation!r}; use RowwiseParallel, or "
                             f"an inner activation")

    def _placements(self, module: nn.Module, layout: LayerLayout) -> list[tuple[nn.Module, str, Placement]]:
        plan = [(module, f.name, Shard(f.rank)) for f in (*layout.input_side, *layout.output_side)]
        return plan + [(module, "bias", Replicate())]

    def local_forward(self, module: nn.Module, x: Tensor, group: Any) -> Tensor:
        layout = _layers.layout_of(module)
        factors = {f.name: _local(module, f.name) for f in (*layout.input_side, *layout.output_side)}
        partial = _layers.local_product(module, reduce_gradient(x, group), factors, None, "none")
        y = reduce_value(partial, group)
        bias = _local(module, "bias")
        return y if bias is None else y + bias
