#!/usr/bin/env bash
# GPU check of the CUDA wheel (issue 41), in one short call on a GPU machine without network:
# installs the carried sketchcore-cu13 wheel into a fresh venv that sees the machine's packages
# (torch, CuPy and, where installed, NVIDIA's nvidia-cublas pip package), shows where cuBLASLt
# is found with no framework loaded, runs the GPU tests against the installed wheel, and lists the
# cuBLASLt the process mapped.
#
# Prepare on a machine with PyPI (the GPU machine's Python is 3.12; carry .whl, git-ignored):
#   bash bench/gpu/fetch_wheels.sh                       # scipy-openblas32 etc. into .whl/
#   PYTHON=python3.12 WHEELS=cu13 bash tools/wheels/build_and_test.sh /tmp/w
#   mkdir -p .whl/cuda && cp /tmp/w/wheelhouse/sketchcore_cu13-*-cp312-*.whl .whl/cuda/
# Run there:  bash bench/gpu/wheel_check.sh OUTDIR     (TIMEOUT_TESTS=420 by default)
# .whl/cuda/ is a subfolder so that bench/gpu/run.sh's `wheels` step does not install the wheel.
set -uo pipefail
out=${1:?usage: bench/gpu/wheel_check.sh OUTDIR}
mkdir -p "$out" && out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../.."
python=${PYTHON:-python3}
wheel=$(ls .whl/cuda/sketchcore_cu13-*.whl 2>/dev/null | head -n 1)
[ -n "$wheel" ] || { echo "no .whl/cuda/sketchcore_cu13-*.whl: see this script's header"; exit 2; }
status=0

venv=/tmp/sketchcore-wheel-venv
rm -rf "$venv"
"$python" -m venv --system-site-packages "$venv"
"$venv/bin/python" -m pip install -q --no-index --no-deps --find-links .whl "$wheel" .whl/scipy_openblas32-*.whl \
  || { echo "FAIL: installing $wheel"; exit 1; }

echo "== the installed wheel (must be the venv's, not a source build elsewhere on the path)"
(cd /tmp && "$venv/bin/python" - <<'EOF') | tee "$out/wheel.txt" || status=1
import os, sys, sketchcore
where = os.path.realpath(sketchcore.__file__)
assert where.startswith(os.path.realpath(sys.prefix)), f"sketchcore from {where}, not the venv"
info = sketchcore.build_info()
print("sketchcore", sketchcore.__version__, where, info, "devices", sketchcore.cuda_device_count())
assert info["cuda"] and sketchcore.cuda_device_count() > 0, "expected the CUDA backend and a device"
EOF

echo "== cuBLASLt as the search finds it with no framework loaded"
(cd /tmp && "$venv/bin/python" - <<'EOF') | tee "$out/cublaslt.txt" || status=1
import glob, os, sys
from sketchcore import _cublaslt, _cuda
major = _cuda.cuda_major()
pip_dirs = [p for p in sys.path if glob.glob(os.path.join(p, "nvidia", f"cu{major}", "lib", f"libcublasLt.so.{major}"))]
found = _cublaslt.ensure_loaded(major)
print("found", found, "| NVIDIA pip package on sys.path:", pip_dirs or "none")
if pip_dirs:
    assert found.found_by == "pip package nvidia-cublas", f"expected the pip package, got {found}"
else:
    print("NOT VERIFIED: this machine has no nvidia-cublas pip package; cuBLASLt came from", found.found_by)
EOF
(cd /tmp && "$venv/bin/python" -m sketchcore info) > "$out/info.txt" 2>&1 || status=1
grep -E "cublaslt|cuda" "$out/info.txt"

echo "== GPU tests against the wheel"
per_test=(); "$venv/bin/python" -c "import pytest_timeout" 2>/dev/null && per_test=(--timeout=120)
timeout -k 10 "${TIMEOUT_TESTS:-420}" "$venv/bin/python" -m pytest -m gpu -q -rs -p no:cacheprovider "${per_test[@]}" \
  --junitxml="$out/gpu-tests.xml" tests 2>&1 | tee "$out/gpu-tests.log" | tail -n 15
[ "${PIPESTATUS[0]}" = 0 ] || status=1

echo "== which cuBLASLt a GPU call mapped (torch loads its own first where installed)"
(cd /tmp && "$venv/bin/python" - <<'EOF') | tee -a "$out/cublaslt.txt" || status=1
import numpy as np, sketchcore
from sketchcore import _cublaslt, _cuda
try:
    import cupy as xp
except ImportError:
    import torch as xp_t
    xp = None
if xp is not None:
    x, S, U = (xp.asarray(np.random.rand(*s).astype(np.float32)) for s in [(8, 16), (16, 4), (4, 8)])
    y = sketchcore.sketched_matmul(x, S, U)
    err = float(abs(xp.asnumpy(y) - (xp.asnumpy(x) @ xp.asnumpy(S)) @ xp.asnumpy(U)).max())
else:
    x, S, U = (xp_t.rand(*s, device="cuda") for s in [(8, 16), (16, 4), (4, 8)])
    err = float((sketchcore.sketched_matmul(x, S, U) - (x @ S) @ U).abs().max())
with open("/proc/self/maps") as maps:
    libs = sorted({line.split()[-1] for line in maps if "libcublasLt" in line})
print("GPU call max abs error", err, "| found", _cublaslt.ensure_loaded(_cuda.cuda_major()), "| mapped", libs)
assert err < 1e-4 and len(libs) == 1, (err, libs)
EOF

echo
echo "wheel check: $([ $status = 0 ] && echo OK || echo FAILED), logs in $out"
exit $status
