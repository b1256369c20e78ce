"""Panther's ``SkAutoTuner/Visualizer`` package: :class:`sketchcore.tuner.ModelVisualizer`."""
from sketchcore.tuner.SkAutoTuner.Visualizer.ModelVisualizer import ModelVisualizer

__all__ = ["ModelVisualizer"]
