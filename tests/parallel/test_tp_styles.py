"""Tensor-parallel styles of sketched layers on 2 and 4 CPU processes (gloo): see
tests/parallel/distributed/tp_layers.py for the checks each process runs."""
from __future__ import annotations

import sys
import pathlib

import pytest

pytest.importorskip("torch")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "distributed"))

from dist_launcher import run_world  # noqa: E402

CHECKS = ["outputs_gradients_and_steps_equal_one_process", "collectives_are_the_documented_ones",
          "bad_plans_raise_in_parallelize_module", "parallelized_sketched_layers_move_and_cast",
          "dense_linear_goes_to_torch_styles"]


@pytest.mark.parametrize("world_size", [2, 4])
def test_styles_equal_one_process_and_communicate_as_documented(world_size: int) -> None:
    output = run_world(world_size, "tp_layers", CHECKS)
    for check in CHECKS:
        assert f"rank 0: {check} ok" in output
