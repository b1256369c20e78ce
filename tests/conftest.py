import secrets
import sys

import numpy as np
import pytest


@pytest.fixture
def rng(request):
    """Fresh random data for every test; the seed is reported if the test fails."""
    seed = secrets.randbits(63)
    request.node._sketchcore_seed = seed
    return np.random.default_rng(seed)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    seed = getattr(item, "_sketchcore_seed", None)
    if report.failed and seed is not None:
        report.sections.append(("random seed", f"rng fixture seed: {seed}"))


def pytest_make_parametrize_id(config, val, argname):
    """Readable test ids for dtypes ("float32", not "dtype0"), so that `-k float32` selects
    them (bench/gpu/run.sh's sanitizer subsets do)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(val, torch.dtype):
        return str(val).removeprefix("torch.")
    return None
