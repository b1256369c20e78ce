"""Distributed checkpoints of a sketched LLaMA resharded from 4 processes (FSDP2 + TP, 2 × 2
mesh) to 2 (TP) and to one plain process, bit-exact (tests/parallel/distributed/dist_checkpoint.py)."""
from __future__ import annotations

import pathlib
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "distributed"))

from dist_launcher import run_world  # noqa: E402


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled, unavailable or uninitialized")
def test_checkpoint_saved_on_4_ranks_loads_on_2_and_on_1(tmp_path: pathlib.Path) -> None:
    env = {"SKETCHCORE_TEST_CHECKPOINT": str(tmp_path)}
    run_world(4, "dist_checkpoint", ["save_from_fsdp2_tp_on_4_ranks"], env=env)
    run_world(2, "dist_checkpoint", ["load_into_tp_on_2_ranks"], env=env)
    import dist_checkpoint as checkpoint  # one plain process: this one, no process group
    model, optimizer = checkpoint.fresh_model_and_optimizer()
    before = model.lm_head.weight.detach().clone()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SKETCHCORE_TEST_CHECKPOINT", str(tmp_path))
        checkpoint.load_into(model, optimizer)
        checkpoint.assert_equal_to_reference(model, optimizer, str(tmp_path / "reference.pt"))
    # the check can fail: the fresh model differed from the checkpoint before loading
    reference = checkpoint.torch.load(tmp_path / "reference.pt", weights_only=True)
    assert not checkpoint.torch.equal(before, reference[".model.lm_head.weight"])
