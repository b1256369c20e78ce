"""Panther's ``Configs/TuningConfigs.py``: :class:`sketchcore.tuner.TuningConfigs`."""
from sketchcore.tuner._configs import TuningConfigs

__all__ = ["TuningConfigs"]
