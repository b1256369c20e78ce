"""Panther's ``Configs/ParamsResolver.py``: :class:`sketchcore.tuner.ParamsResolver`."""
from sketchcore.tuner._resolvers import ParamsResolver

__all__ = ["ParamsResolver"]
