"""Runs check functions on N local processes over gloo (a torchrun of our own, with a timeout):
the parent starts the processes with a free port, waits for all, and fails with every rank's
output when one fails or the run outlives its time (the processes are then killed, so a hung
collective never hangs the test session)."""
from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys
import tempfile
from typing import Optional

_ROOT = pathlib.Path(__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_world(world_size: int, worker: str, checks: list[str], timeout: float = 55.0,
              env: Optional[dict[str, str]] = None) -> str:
    """Runs ``checks`` (names of functions in ``tests/distributed/<worker>.py``) on
    ``world_size`` processes; returns rank 0's output. Raises AssertionError with every rank's
    output when a process fails or the run takes more than ``timeout`` seconds."""
    port = _free_port()
    procs, logs = [], []
    for rank in range(world_size):
        log = tempfile.TemporaryFile(mode="w+")
        child_env = {**os.environ, **(env or {}), "RANK": str(rank), "LOCAL_RANK": str(rank),
                     "WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                     "OMP_NUM_THREADS": "1", "PYTHONPATH": str(_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        procs.append(subprocess.Popen([sys.executable, str(_ROOT / f"{worker}.py"), *checks], env=child_env,
                                      stdout=log, stderr=subprocess.STDOUT))
        logs.append(log)
    timed_out = False
    try:
        for proc in procs:
            proc.wait(timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    outputs = []
    for log in logs:
        log.seek(0)
        outputs.append(log.read())
        log.close()
    failed = [r for r, p in enumerate(procs) if p.returncode != 0]
    if timed_out or failed:
        why = f"timed out after {timeout} s" if timed_out else f"ranks {failed} failed"
        text = "\n".join(f"--- rank {r} (exit {p.returncode}) ---\n{out}" for r, (p, out) in enumerate(zip(procs, outputs)))
        raise AssertionError(f"{worker} {checks} on {world_size} processes: {why}\n{text}")
    return outputs[0]
