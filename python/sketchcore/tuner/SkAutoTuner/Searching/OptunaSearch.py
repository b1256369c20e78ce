"""Panther's ``Searching/OptunaSearch.py``: :class:`sketchcore.tuner.OptunaSearch`."""
from sketchcore.tuner._optuna import OptunaSearch

__all__ = ["OptunaSearch"]
