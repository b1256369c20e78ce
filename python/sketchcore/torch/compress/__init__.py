"""Model compression: ``sketch_model`` (``_convert``) turns its arguments into a frozen plan
(``_plan``: validation, matching, rank choice) and hands each matched module to the handler of
its kind (``_handlers``: the interface and registry; ``_handle_linear``, ``_handle_conv``,
``_handle_attention``), whose rows make the report (``_report``). Beside them: the layer built for
one linear map (``_convert_linear``), the registry of linear-like classes (``_registry``),
calibration (``_calibrate``), data-aware factors (``_whitened``), pretraining options
(``_pretraining``), module surgery (``_surgery``) and ``restore_model`` (``_restore``). Built on
:mod:`sketchcore.torch.layers`; public names are re-exported by :mod:`sketchcore.torch`."""
