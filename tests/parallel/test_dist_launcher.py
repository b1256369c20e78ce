"""The launcher of the distributed tests has teeth and never hangs: a failing check fails the
run with its traceback, a rank stuck in a collective is killed at the timeout."""
from __future__ import annotations

import pathlib
import sys
import time

import pytest

pytest.importorskip("torch")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "distributed"))

from dist_launcher import run_world  # noqa: E402

WORKER = '''
import time
import torch, torch.distributed as dist

def fails_on_rank_1():
    assert dist.get_rank() != 1, "rank 1 says no"

def rank_0_waits_for_nobody():
    if dist.get_rank() == 0:
        dist.all_reduce(torch.ones(1))  # rank 1 never joins
    else:
        time.sleep(120)  # stuck elsewhere
'''


def test_a_failing_check_fails_the_run(tmp_path: pathlib.Path) -> None:
    (tmp_path / "launcher_probe.py").write_text(WORKER)
    with pytest.raises(AssertionError, match="(?s)ranks \\[1\\] failed.*rank 1 says no"):
        run_world(2, "launcher_probe", ["fails_on_rank_1"], path=str(tmp_path))


def test_a_hung_collective_is_killed_at_the_timeout(tmp_path: pathlib.Path) -> None:
    (tmp_path / "launcher_probe.py").write_text(WORKER)
    start = time.monotonic()
    with pytest.raises(AssertionError, match="timed out after 5"):
        run_world(2, "launcher_probe", ["rank_0_waits_for_nobody"], timeout=5, path=str(tmp_path))
    assert time.monotonic() - start < 30
