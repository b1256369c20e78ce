"""Every activation kernel family this CPU can run (``"portable"``, and ``"avx2"`` and ``"avx512"``
where it has them) through the public API: a child process per family, chosen by
``SKETCHCORE_CPU_ACTIVATIONS``, computes every fused activation forward and backward on data
spanning the near and far ranges of the kernels, at a width (43) that leaves a partial vector in
every row; each is checked here against float64. The families differ in some bits (different
approximations) and all meet the same bound."""
import os
import subprocess
import sys

import numpy as np

from _reference import activate

ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu")

CHILD = r"""
import sys
import numpy as np
import sketchcore
rng = np.random.default_rng(26)
# H = x·I·I spans [-30, 30] (near zero, the tails, and the far ranges of the kernels).
x = np.concatenate([rng.uniform(-30, 30, (64, 43)), rng.standard_normal((64, 43))]).astype(np.float32)
eye = np.eye(43, dtype=np.float32)
g = rng.standard_normal(x.shape).astype(np.float32)
results = {"x": x, "g": g}
for a in sys.argv[2].split(","):
    z = np.empty_like(x)
    results[a + ":y"] = sketchcore.sketched_matmul(x, eye, eye, activation=a, intermediate=z)
    results[a + ":dx"] = sketchcore.sketched_matmul_backward(g, x, eye, eye, z, activation=a, needs=("x",))[0]
results["kernels"] = np.array(sketchcore.build_info()["cpu_activation_kernels"])
np.savez(sys.argv[1], **results)
"""


FAMILIES = ("portable", "avx2", "avx512")


def run_child(path, family):
    env = dict(os.environ)
    env.pop("SKETCHCORE_CPU_ACTIVATIONS", None)
    if family is not None:
        env["SKETCHCORE_CPU_ACTIVATIONS"] = family
    subprocess.run([sys.executable, "-c", CHILD, str(path), ",".join(ACTIVATIONS)], env=env, check=True, timeout=300)
    return np.load(path)


def derivative64(h, name):
    """act′(h) in float64 by a central difference of the float64 reference (step 1e-6 · max(1, |h|))."""
    step = 1e-6 * np.maximum(1.0, np.abs(h))
    return (activate(h + step, name) - activate(h - step, name)) / (2 * step)


def test_every_activation_kernel_family_matches_float64(tmp_path):
    best = str(run_child(tmp_path / "best.npz", None)["kernels"])
    assert best in FAMILIES
    runs = {}
    for family in FAMILIES[:FAMILIES.index(best) + 1]:
        runs[family] = run_child(tmp_path / f"{family}.npz", family)
        assert str(runs[family]["kernels"]) == family  # the library saw the setting
    h, g = runs["portable"]["x"].astype(np.float64), runs["portable"]["g"].astype(np.float64)
    for family, run in runs.items():
        for a in ACTIVATIONS:
            y, dx = run[a + ":y"].astype(np.float64), run[a + ":dx"].astype(np.float64)
            ref = activate(h, a)
            # Forward: within a few float32 ulps of the exact value (4 ulp ≈ 4.8e-7 relative),
            # or of the output's scale where the exact value is tiny.
            assert np.all(np.abs(y - ref) <= 5e-7 * np.abs(ref) + 1e-37), (family, a)
            dref = g * derivative64(h, a) if a != "relu" else np.where(h > 0, g, 0.0)
            # The gradient: act′ to a few ulps (the difference quotient adds ~1e-9), times g.
            assert np.all(np.abs(dx - dref) <= 2e-6 * np.abs(g) + 1e-30), (family, a)
    # The families really ran different code: each pair differs in some bits of each activation.
    families = list(runs)
    for i, first in enumerate(families):
        for second in families[i + 1:]:
            for a in ("gelu", "gelu_tanh", "silu"):
                assert not np.array_equal(runs[first][a + ":y"], runs[second][a + ":y"]), (first, second, a)
                assert not np.array_equal(runs[first][a + ":dx"], runs[second][a + ":dx"]), (first, second, a)


def test_an_unknown_kernel_setting_caps_nothing(tmp_path):
    best = str(run_child(tmp_path / "best.npz", None)["kernels"])
    assert str(run_child(tmp_path / "other.npz", "sse2")["kernels"]) == best
