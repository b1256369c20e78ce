"""Fuzz test: thousands of random valid and invalid calls (tests/_fuzz_cases.py), each batch in
its own interpreter so that a crash or a hang is caught and reported with its input.

Valid calls must return the float64 reference's values; invalid ones must raise ValueError,
TypeError, MemoryError or IndexError with a message; no call may leave a pool block in use.
The seeds are fresh on every run and printed on failure; ``SKETCHCORE_FUZZ_SEED`` replays one.
"""
import os
import pathlib
import secrets
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).parents[1]  # tests/, where _fuzz_cases.py lives
CASES_PER_BATCH = 2000
BATCHES = 4
TIMEOUT_S = 120


_FIXED = os.environ.get("SKETCHCORE_FUZZ_SEED")
SEEDS = [int(_FIXED)] if _FIXED else [secrets.randbits(32) for _ in range(BATCHES)]


@pytest.mark.parametrize("seed", SEEDS, ids=[f"batch{i}" for i in range(len(SEEDS))])
def test_random_calls_never_crash_and_are_right_or_refused(seed):
    try:
        result = subprocess.run([sys.executable, str(HERE / "_fuzz_cases.py"), str(seed), str(CASES_PER_BATCH)],
                                cwd=HERE, capture_output=True, text=True, timeout=TIMEOUT_S)
        stdout, returncode = result.stdout, result.returncode
        stderr = result.stderr
    except subprocess.TimeoutExpired as e:
        out = e.stdout or b""
        stdout, returncode, stderr = out.decode() if isinstance(out, bytes) else out, "a hang", ""
    lines = stdout.splitlines()
    last_case = next((line for line in reversed(lines) if line.startswith("CASE ")), "no case started")
    assert returncode == 0 and lines and lines[-1] == "DONE", (
        f"seed {seed}: the batch ended with {returncode!r} during {last_case}\nstderr: {stderr[-2000:]}")
    verdicts = [line for line in lines if line.startswith("VERDICT ")]
    assert len(verdicts) == CASES_PER_BATCH
    bad = [(lines[lines.index(v) - 1], v) for v in verdicts if ": BAD " in v]
    assert not bad, f"seed {seed}:\n" + "\n".join(f"{case}\n  {verdict}" for case, verdict in bad[:20])
    # The generator must exercise both sides: a run of only refusals would prove little.
    ok = sum(v.endswith(": ok") for v in verdicts)
    assert ok > CASES_PER_BATCH // 4 and CASES_PER_BATCH - ok > CASES_PER_BATCH // 4
