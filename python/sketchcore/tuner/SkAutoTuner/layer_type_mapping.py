"""Panther's ``SkAutoTuner/layer_type_mapping.py``: ``LAYER_TYPE_MAPPING`` (with Panther's
``"class_path"`` and ``"params"`` keys) and ``get_sketched_class``."""
from sketchcore.tuner._candidates import LAYER_TYPE_MAPPING, get_sketched_class

__all__ = ["LAYER_TYPE_MAPPING", "get_sketched_class"]
