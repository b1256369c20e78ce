"""Panther's ``SkAutoTuner/Configs`` package: the config classes, parameter specifications and
resolvers of :mod:`sketchcore.tuner`."""
from sketchcore.tuner.SkAutoTuner.Configs.LayerConfig import LayerConfig
from sketchcore.tuner.SkAutoTuner.Configs.LayerNameResolver import LayerNameResolver
from sketchcore.tuner.SkAutoTuner.Configs.ParamSpec import Categorical, Float, Int, ParamSpec
from sketchcore.tuner.SkAutoTuner.Configs.ParamsResolver import ParamsResolver
from sketchcore.tuner.SkAutoTuner.Configs.TuningConfigs import TuningConfigs

__all__ = ["Categorical", "Float", "Int", "LayerConfig", "LayerNameResolver", "ParamSpec", "ParamsResolver",
           "TuningConfigs"]
