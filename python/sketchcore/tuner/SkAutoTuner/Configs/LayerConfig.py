"""Panther's ``Configs/LayerConfig.py``: :class:`sketchcore.tuner.LayerConfig`."""
from sketchcore.tuner._configs import LayerConfig

__all__ = ["LayerConfig"]
