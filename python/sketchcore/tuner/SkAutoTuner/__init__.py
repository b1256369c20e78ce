"""Panther's module layout, ``panther.tuner.SkAutoTuner``, over :mod:`sketchcore.tuner`: code that
imports from ``panther.tuner.SkAutoTuner`` (or its ``Configs``, ``Searching``, ``Visualizer``,
``SKAutoTuner`` and ``layer_type_mapping`` modules) runs with ``panther`` renamed ``sketchcore``.
Every name here is the :mod:`sketchcore.tuner` object itself, documented there.

>>> from sketchcore.tuner.SkAutoTuner import SKAutoTuner, TuningConfigs, LayerConfig
>>> from sketchcore.tuner.SkAutoTuner.Configs import Int, Categorical
>>> import sketchcore.tuner
>>> SKAutoTuner is sketchcore.tuner.SKAutoTuner and Int is sketchcore.tuner.Int
True
"""
# the class takes the submodule's name in this package, as in Panther
from sketchcore.tuner.SkAutoTuner.SKAutoTuner import SKAutoTuner
from sketchcore.tuner.SkAutoTuner.Configs import Categorical, Float, Int, LayerConfig, TuningConfigs
from sketchcore.tuner.SkAutoTuner.Searching import OptunaSearch, SearchAlgorithm
from sketchcore.tuner.SkAutoTuner.Visualizer import ModelVisualizer

__all__ = ["Categorical", "Float", "Int", "LayerConfig", "ModelVisualizer", "OptunaSearch", "SKAutoTuner",
           "SearchAlgorithm", "TuningConfigs"]
