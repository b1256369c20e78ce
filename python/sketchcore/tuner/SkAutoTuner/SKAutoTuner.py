"""Panther's ``SkAutoTuner/SKAutoTuner.py``: :class:`sketchcore.tuner.SKAutoTuner`."""
from sketchcore.tuner._tuner import SKAutoTuner

__all__ = ["SKAutoTuner"]
