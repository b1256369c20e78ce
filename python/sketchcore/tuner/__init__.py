"""Accuracy-driven choice of sketched layers: Panther's ``SKAutoTuner`` API (``LayerConfig``,
``TuningConfigs``, ``Categorical``/``Int``/``Float``, ``tune``, ``apply_best_params``, ...) with a
default search that reads each layer's error-vs-size curve off its singular spectrum and spends
model evaluations only to place the per-layer budgets (:class:`SpectralSearch`). Panther's
black-box searches stay available (:class:`OptunaSearch` when Optuna is installed,
:class:`RandomSearch`, :class:`GridSearch`).

>>> tuner = SKAutoTuner(model, TuningConfigs([LayerConfig({"type": "Linear"}, "auto")]),
...                     accuracy_eval_func=evaluate, accuracy_threshold=dense_accuracy - 0.01)
>>> tuner.tune(); model = tuner.apply_best_params()
"""
from __future__ import annotations

from typing import Any

from sketchcore.tuner._candidates import LAYER_TYPE_MAPPING
from sketchcore.tuner._configs import LayerConfig, TuningConfigs
from sketchcore.tuner._params import Categorical, Float, Int, ParamSpec
from sketchcore.tuner._search import GridSearch, RandomSearch, SearchAlgorithm
from sketchcore.tuner._spectral import SpectralSearch
from sketchcore.tuner._tuner import SKAutoTuner

__all__ = ["LAYER_TYPE_MAPPING", "Categorical", "Float", "GridSearch", "Int", "LayerConfig", "OptunaSearch",
           "ParamSpec", "RandomSearch", "SKAutoTuner", "SearchAlgorithm", "SpectralSearch", "TuningConfigs"]


def __getattr__(name: str) -> Any:
    """``OptunaSearch`` is imported on first use (Optuna is optional and slow to import)."""
    if name == "OptunaSearch":
        from sketchcore.tuner._optuna import OptunaSearch
        return OptunaSearch
    raise AttributeError(f"module 'sketchcore.tuner' has no attribute {name!r}")
