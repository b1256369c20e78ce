"""Panther's ``Configs/LayerNameResolver.py``: :class:`sketchcore.tuner.LayerNameResolver`."""
from sketchcore.tuner._resolvers import LayerNameResolver

__all__ = ["LayerNameResolver"]
