"""A sketched LLaMA (LowRankLinear and SKLinear projections) under TP, FSDP2 + TP and DDP on 2
and 4 CPU processes equals one process (tests/parallel/distributed/tp_llama.py)."""
from __future__ import annotations

import pathlib
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "distributed"))

from dist_launcher import run_world  # noqa: E402


def test_tp_and_ddp_on_2_ranks() -> None:
    run_world(2, "tp_llama", ["tensor_parallel_equals_one_process", "ddp_equals_one_process"])


def test_tp_on_4_ranks() -> None:
    run_world(4, "tp_llama", ["tensor_parallel_equals_one_process"])


def test_fsdp2_tp_on_a_2x2_mesh_float32_and_bfloat16() -> None:
    run_world(4, "tp_llama", ["fsdp2_tp_equals_one_process", "fsdp2_tp_bfloat16_mixed_precision"])
