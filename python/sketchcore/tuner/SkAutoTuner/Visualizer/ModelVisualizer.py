"""Panther's ``Visualizer/ModelVisualizer.py``: :class:`sketchcore.tuner.ModelVisualizer`."""
from sketchcore.tuner._visualizer import ModelVisualizer

__all__ = ["ModelVisualizer"]
