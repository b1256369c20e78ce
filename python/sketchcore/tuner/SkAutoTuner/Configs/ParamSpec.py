"""Panther's ``Configs/ParamSpec.py``: the parameter specifications of :mod:`sketchcore.tuner`
and Panther's helper functions over them."""
from sketchcore.tuner._params import (Categorical, Float, Int, ParamSpec, get_param_choices, is_param_spec,
                                      to_categorical)

__all__ = ["Categorical", "Float", "Int", "ParamSpec", "get_param_choices", "is_param_spec", "to_categorical"]
