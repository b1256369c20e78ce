"""sketchcore's operators on DTensors, on 2 and 4 CPU processes: each supported layout runs on
local shards, forward and backward, equal to one process; other layouts raise naming the
placements (tests/parallel/distributed/dtensor_ops.py)."""
from __future__ import annotations

import pathlib
import sys

import pytest

pytest.importorskip("torch")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "distributed"))

from dist_launcher import run_world  # noqa: E402


@pytest.mark.parametrize("world_size", [2, 4])
def test_operators_run_sharded_or_raise(world_size: int) -> None:
    run_world(world_size, "dtensor_ops", ["supported_layouts_run_on_shards",
                                          "other_layouts_raise_naming_the_placements"])
