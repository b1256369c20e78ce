"""Panther's ``Searching/SearchAlgorithm.py``: :class:`sketchcore.tuner.SearchAlgorithm`."""
from sketchcore.tuner._search import SearchAlgorithm

__all__ = ["SearchAlgorithm"]
