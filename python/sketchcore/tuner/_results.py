"""The tuner's results log: the evaluation history, the results rows per layer (or group) and
the results table. It takes values and imports nothing of the tuner."""
from __future__ import annotations

from typing import Any, Optional

#: Panther's parameter columns, in every results table (empty for e.g. a LowRankLinear).
PANTHER_COLUMNS = ("num_terms", "low_rank")
_ROW_KEYS = ("layer_class", "score", "accuracy", "speed", "parameters", "evaluation")


class ResultsLog:
    """What one ``tune()`` records: ``history`` (one row per evaluation), ``results`` (per
    layer or ``"_"``-joined group, one row per evaluation), ``evaluations`` (accuracy calls)."""

    def __init__(self, verbose: bool = False) -> None:
        self.verbose = verbose
        self.history: list[dict[str, Any]] = []
        self.results: dict[str, list[dict[str, Any]]] = {}
        self.evaluations = 0

    def log(self, stage: str, accuracy: float, size: int, layers: dict[str, Any], meets: bool) -> int:
        """Appends one evaluation to the history and returns its number."""
        row = {"evaluation": len(self.history), "stage": stage, "accuracy": accuracy, "parameters": size,
               "layers": layers, "meets_threshold": meets}
        self.history.append(row)
        if self.verbose:
            print(f"[SKAutoTuner] {stage} #{row['evaluation']}: accuracy {accuracy:.5g}, {size} numbers stored, "
                  f"{layers}")
        return len(self.history) - 1

    def record(self, key: str, params: Optional[dict[str, Any]], layer_class: str, score: float, accuracy: float,
               speed: Optional[float], size: int) -> None:
        """One results row of the last evaluation logged, for the layer or group ``key``."""
        self.results.setdefault(key, []).append(
            {"params": params, "layer_class": layer_class, "score": score, "accuracy": accuracy, "speed": speed,
             "parameters": size, "evaluation": self.history[-1]["evaluation"]})

    def set_speed(self, evaluation: int, speed: float) -> None:
        """Gives the rows of ``evaluation`` their measured speed, which becomes their score."""
        for rows in self.results.values():
            for row in rows:
                if row["evaluation"] == evaluation:
                    row["speed"] = row["score"] = speed


def table_rows(results: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The results table as dicts: ``layer_name``, Panther's columns and every parameter, then
    the row's class, score, accuracy, speed, stored numbers and evaluation number."""
    keys = list(PANTHER_COLUMNS)
    for rows in results.values():
        for result in rows:
            keys += [k for k in (result.get("params") or {}) if k not in keys]
    table = []
    for name, rows in results.items():
        for result in rows:
            row: dict[str, Any] = {"layer_name": name}
            row.update({key: (result.get("params") or {}).get(key) for key in keys})
            row.update({key: result.get(key) for key in _ROW_KEYS})
            table.append(row)
    return table
