"""The portable activation kernels (the code a CPU without AVX-512 runs, here as compiled for this
CPU) through the public API: a child process with ``SKETCHCORE_AVX512_ACTIVATIONS=0`` computes
every fused activation forward and backward on data spanning the near and far ranges of the
kernels, checked here against float64. Where ``build_info()["cpu_avx512_activations"]`` the
default process runs the intrinsic kernels instead: the two then differ in some bits (different
approximations) and both meet the same bound."""
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
x = np.concatenate([rng.uniform(-30, 30, (64, 40)), rng.standard_normal((64, 40))]).astype(np.float32)
eye = np.eye(40, dtype=np.float32)
g = rng.standard_normal(x.shape).astype(np.float32)
results = {"x": x, "g": g}
for a in sys.argv[2].split(","):
    z = np.empty_like(x)
    results[a + ":y"] = sketchcore.sketched_matmul(x, eye, eye, activation=a, intermediate=z)
    results[a + ":dx"] = sketchcore.sketched_matmul_backward(g, x, eye, eye, z, activation=a, needs=("x",))[0]
results["avx512"] = np.array(sketchcore.build_info()["cpu_avx512_activations"])
np.savez(sys.argv[1], **results)
"""


def run_child(path, portable):
    env = dict(os.environ)
    env.pop("SKETCHCORE_AVX512_ACTIVATIONS", None)
    if portable:
        env["SKETCHCORE_AVX512_ACTIVATIONS"] = "0"
    subprocess.run([sys.executable, "-c", CHILD, str(path), ",".join(ACTIVATIONS)], env=env, check=True, timeout=300)
    return np.load(path)


def derivative64(h, name):
    """act′(h) in float64 by a central difference of the float64 reference (step 1e-6 · max(1, |h|))."""
    step = 1e-6 * np.maximum(1.0, np.abs(h))
    return (activate(h + step, name) - activate(h - step, name)) / (2 * step)


def test_portable_and_avx512_activation_kernels_both_match_float64(tmp_path):
    portable = run_child(tmp_path / "portable.npz", portable=True)
    default = run_child(tmp_path / "default.npz", portable=False)
    h, g = portable["x"].astype(np.float64), portable["g"].astype(np.float64)
    for run in (portable, default):
        for a in ACTIVATIONS:
            y, dx = run[a + ":y"].astype(np.float64), run[a + ":dx"].astype(np.float64)
            ref = activate(h, a)
            # Forward: within a few float32 ulps of the exact value (4 ulp ≈ 4.8e-7 relative),
            # or of the output's scale where the exact value is tiny.
            assert np.all(np.abs(y - ref) <= 5e-7 * np.abs(ref) + 1e-37), a
            dref = g * derivative64(h, a) if a != "relu" else np.where(h > 0, g, 0.0)
            # The gradient: act′ to a few ulps (the difference quotient adds ~1e-9), times g.
            assert np.all(np.abs(dx - dref) <= 2e-6 * np.abs(g) + 1e-30), a
    assert not bool(portable["avx512"])  # the switch is seen by the library
    differ = any(not np.array_equal(portable[a + ":y"], default[a + ":y"]) for a in ("gelu", "gelu_tanh", "silu"))
    assert differ == bool(default["avx512"])  # and the two runs really took different kernels
