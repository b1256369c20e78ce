"""Runs check functions on N local processes over gloo (a torchrun of our own, with a timeout).

The processes are forked from one ``multiprocessing`` fork server that has already imported
torch, transformers and sketchcore, once per pytest session: on this 2-core machine importing
them costs each process several seconds, which four fresh processes per test would pay again.
The parent waits for all of them and fails with every rank's output when one fails or the run
outlives its time; the processes are then killed, so a hung collective never hangs the session.
"""
from __future__ import annotations

import importlib
import multiprocessing
import os
import pathlib
import socket
import sys
import tempfile
from typing import Optional

_HERE = pathlib.Path(__file__).resolve().parent
_PRELOAD = ["torch", "torch.distributed", "transformers", "sketchcore.torch", "sketchcore.torch.parallel"]
_context: Optional[multiprocessing.context.BaseContext] = None


def _forkserver() -> multiprocessing.context.BaseContext:
    global _context
    if _context is None:
        if str(_HERE) not in sys.path:
            sys.path.insert(0, str(_HERE))
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(_PRELOAD)
    return _context


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child(rank: int, world_size: int, port: int, worker: str, checks: list[str], log_path: str,
           env: dict[str, str], path: Optional[str]) -> None:
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(log, 1)
    os.dup2(log, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = sys.stdout
    os.environ.update(env)
    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    for folder in (str(_HERE), path):
        if folder and folder not in sys.path:
            sys.path.insert(0, folder)
    module = importlib.import_module(worker)
    from dist_worker import main
    sys.argv = [worker, *checks]
    main(vars(module))


def run_world(world_size: int, worker: str, checks: list[str], timeout: float = 55.0,
              env: Optional[dict[str, str]] = None, path: Optional[str] = None) -> str:
    """Runs ``checks`` (names of functions in ``tests/parallel/distributed/<worker>.py``, or in
    ``<path>/<worker>.py``) on
    ``world_size`` processes; returns rank 0's output. Raises AssertionError with every rank's
    output when a process fails or the run takes more than ``timeout`` seconds."""
    context = _forkserver()
    port = _free_port()
    with tempfile.TemporaryDirectory() as logs:
        paths = [os.path.join(logs, f"rank{r}.log") for r in range(world_size)]
        procs = [context.Process(target=_child, args=(r, world_size, port, worker, checks, paths[r], env or {}, path))
                 for r in range(world_size)]
        for proc in procs:
            proc.start()
        timed_out = False
        for proc in procs:
            proc.join(timeout=max(1.0, timeout))
            if proc.exitcode is None:
                timed_out = True
                break
        for proc in procs:
            if proc.exitcode is None:
                proc.kill()
                proc.join()
        outputs = [pathlib.Path(p).read_text() if os.path.exists(p) else "" for p in paths]
    failed = [r for r, p in enumerate(procs) if p.exitcode != 0]
    if timed_out or failed:
        why = f"timed out after {timeout} s" if timed_out else f"ranks {failed} failed"
        text = "\n".join(f"--- rank {r} (exit {p.exitcode}) ---\n{out}"
                         for r, (p, out) in enumerate(zip(procs, outputs)))
        raise AssertionError(f"{worker} {checks} on {world_size} processes: {why}\n{text}")
    return outputs[0]
