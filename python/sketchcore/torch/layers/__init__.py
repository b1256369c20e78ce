"""The torch modules: ``SKLinear`` (``_sklinear``), ``LowRankLinear`` (``_lowrank``), ``SKConv2d``
(``_conv``), ``RandMultiHeadAttention`` (``_attention``), their shared state and checkpoint handling
(``_layer_state``, ``_derived_weight``) and the factors that initialise them from a dense weight
(``_factors``). Built on :mod:`sketchcore.torch.ops`; public names are re-exported by
:mod:`sketchcore.torch`."""
