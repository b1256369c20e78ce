"""The differentiable computations under the layers: sketchcore's GEMMs as torch custom operators
(``_ops``, with fake kernels, autograd and autocast), the same bodies as plain autograd Functions for
eager calls (``_eager``), torch.func rules (``_functorch``), the composite formulas that second-order
autograd differentiates (``_second_order``), the functional entry points (``_functional``), Performer
attention (``_performer``, ``_performer_formulas``) and the low-rank activation memory mode
(``_memory_mode``). Imports nothing from the layers above it. Public names are re-exported by
:mod:`sketchcore.torch`."""
