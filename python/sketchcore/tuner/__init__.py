"""Accuracy-driven choice of sketched layers: Panther's ``SKAutoTuner`` API (``LayerConfig``,
``TuningConfigs``, ``Categorical``/``Int``/``Float``, ``tune``, ``apply_best_params``, ...) with a
default search that reads each layer's error-vs-size curve off its singular spectrum and spends
model evaluations only to place the per-layer budgets (:class:`SpectralSearch`), and Panther's
black-box searches (:class:`OptunaSearch`, :class:`RandomSearch`, :class:`GridSearch`).

With a real model, ``accuracy_eval_func(model)`` returns its validation accuracy and the threshold is
a little below the dense model's; :class:`SKAutoTuner`'s example runs the whole loop on a tiny model.
"""
from __future__ import annotations

from sketchcore.tuner._candidates import LAYER_TYPE_MAPPING
from sketchcore.tuner._configs import LayerConfig, TuningConfigs
from sketchcore.tuner._optuna import OptunaSearch  # Optuna itself is imported when one is made
from sketchcore.tuner._params import Categorical, Float, Int, ParamSpec
from sketchcore.tuner._resolvers import LayerNameResolver, ParamsResolver
from sketchcore.tuner._search import GridSearch, RandomSearch, SearchAlgorithm
from sketchcore.tuner._spectral import SpectralSearch
from sketchcore.tuner._tuner import SKAutoTuner
from sketchcore.tuner._visualizer import ModelVisualizer

__all__ = ["LAYER_TYPE_MAPPING", "Categorical", "Float", "GridSearch", "Int", "LayerConfig", "LayerNameResolver",
           "ModelVisualizer", "OptunaSearch", "ParamSpec", "ParamsResolver", "RandomSearch", "SKAutoTuner",
           "SearchAlgorithm", "SpectralSearch", "TuningConfigs"]
