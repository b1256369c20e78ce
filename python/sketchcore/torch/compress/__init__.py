"""Model compression: ``sketch_model`` / ``restore_model`` (``_convert``), the per-layer conversion
(``_convert_linear``), the registry of linear-like classes (``_registry``), calibration
(``_calibrate``), data-aware factors (``_whitened``), pretraining options (``_pretraining``), module
surgery (``_surgery``) and the reports (``_report``). Built on :mod:`sketchcore.torch.layers`;
public names are re-exported by :mod:`sketchcore.torch`."""
