"""Panther's ``SkAutoTuner/Searching`` package: :class:`sketchcore.tuner.SearchAlgorithm` and
:class:`sketchcore.tuner.OptunaSearch` (Optuna is imported when an OptunaSearch is made)."""
from sketchcore.tuner.SkAutoTuner.Searching.OptunaSearch import OptunaSearch
from sketchcore.tuner.SkAutoTuner.Searching.SearchAlgorithm import SearchAlgorithm

__all__ = ["OptunaSearch", "SearchAlgorithm"]
