#!/usr/bin/env bash
# One-command GPU check: build, test, sanitize and benchmark sketchcore's CUDA backend on a fresh
# GPU machine with no network (Python with torch, CuPy, nvcc, CMake, Ninja, scikit-build-core,
# Cython, pytest, pytest-benchmark, hypothesis preinstalled).
#
#   bash bench/gpu/run.sh OUTDIR            # everything
#   STEPS="facts build tests" bash bench/gpu/run.sh OUTDIR   # a subset, in this order
#   DRY_RUN=1 bash bench/gpu/run.sh OUTDIR  # on a CPU machine: runs what needs no GPU, says what it skipped
#   CPU_SUITE=0 ...                          # the tests step runs the GPU tests only
#   TIMEOUT_tests=240 ...                    # a step's wall-clock limit in seconds (default 600)
#
# Wheels the machine lacks (scipy-openblas32 for its Python) are installed from .whl/ in the
# repository root, filled beforehand on a machine with PyPI by bench/gpu/fetch_wheels.sh
# (git-ignored; carry it along). Writes one log per step, the pytest JUnit XML, the benchmark
# JSON and environment facts into OUTDIR, and prints a summary table last.
set -uo pipefail

out=${1:?usage: bench/gpu/run.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
python=${PYTHON:-python3}
steps=${STEPS:-wheels facts build tests sanitize bench llm profile}
dry=${DRY_RUN:-0}
date_tag=$(date -u +%Y-%m-%d)
summary=()

# step NAME COMMAND...: runs COMMAND with its output in OUTDIR/NAME.log and records the result.
step() {
  local name=$1; shift
  local start=$SECONDS
  echo "== $name: $*"
  local limit_var="TIMEOUT_$name"
  # A step is a shell function: run it in a child bash (functions and variables exported below) so
  # that one hung step is killed at its limit and the others still run.
  timeout -k 10 "${!limit_var:-600}" bash -c '"$@"' _ "$@" >"$out/$name.log" 2>&1
  local rc=$?
  [ $rc = 124 ] && echo "step $name: killed at its time limit (${!limit_var:-600} s)" >>"$out/$name.log"
  local tail_line
  tail_line=$(grep -E "passed|failed|error|ERROR SUMMARY|Error" "$out/$name.log" | tail -n 1 | cut -c1-90)
  summary+=("$(printf '%-10s %-4s %5ss  %s' "$name" "$([ $rc = 0 ] && echo ok || echo FAIL)" $((SECONDS - start)) "$tail_line")")
  [ $rc = 0 ] || echo "   -> $name failed (exit $rc); see $out/$name.log"
  return 0
}

skip() { summary+=("$(printf '%-10s %-4s %5s   %s' "$1" "skip" "-" "$2")"); echo "== $1: skipped ($2)"; }

has_gpu() { [ "$dry" != 1 ] && command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; }

facts() {
  echo "date: $(date -u +%FT%TZ)"
  echo "command: bash bench/gpu/run.sh $out"
  # SKETCHCORE_COMMIT: the device tool's copy of .git may lag the working tree it sends.
  echo "git: ${SKETCHCORE_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)} (working tree as sent)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || true
  nvcc --version 2>&1 | tail -n 2 || true
  "$python" - <<'EOF'
import importlib, platform, sys
print("python", sys.version.split()[0], platform.machine())
for name in ("numpy", "torch", "cupy", "jax", "scipy_openblas32", "pytest", "pytest_benchmark", "hypothesis"):
    try:
        module = importlib.import_module(name)
        print(name, getattr(module, "__version__", "?"))
    except Exception as e:  # noqa: BLE001 - a fact, not a failure
        print(name, "missing:", type(e).__name__)
try:
    import torch
    print("torch cuda", torch.version.cuda, "device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
except Exception as e:  # noqa: BLE001
    print("torch cuda: unavailable", e)
EOF
}

wheels() {
  if ! compgen -G ".whl/*.whl" >/dev/null; then
    echo "no .whl/ folder: assuming every package is installed"; return 0
  fi
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/sketchcore-site .whl/*.whl
}

build() {
  SKETCHCORE_CUDA=ON CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES=90 ${CMAKE_ARGS:-}" \
    "$python" -m pip install -v --no-build-isolation --no-deps . || return 1
  (cd /tmp && "$python" - <<'EOF'
import sketchcore, torch
info = sketchcore.build_info()
print("build_info", info, "devices", sketchcore.cuda_device_count())
assert info["cuda"], "the CUDA backend was not built"
x = torch.randn(8, 16, device="cuda")
sketchcore.sketched_matmul(x, torch.randn(16, 4, device="cuda"), torch.randn(4, 8, device="cuda"))
torch.cuda.synchronize()
with open("/proc/self/maps") as maps:
    libs = sorted({line.split()[-1] for line in maps if "cublasLt" in line})
print("cuBLASLt loaded from", libs)
EOF
  )
}

tests() {
  local per_test=()
  # A hung test fails alone instead of taking the step's whole limit (pytest-timeout, where installed).
  "$python" -c "import pytest_timeout" 2>/dev/null && per_test=(--timeout=120)
  "$python" -m pytest -m gpu -rs -q -p no:cacheprovider "${per_test[@]}" --junitxml="$out/gpu-tests.xml" tests
  local rc=$?
  # The CPU suite too: the GPU build must not change CPU behaviour.
  if [ "${CPU_SUITE:-1}" = 1 ]; then
    "$python" -m pytest -m "not gpu" -q -p no:cacheprovider "${per_test[@]}" tests || rc=1
  fi
  return $rc
}

sanitize() {
  command -v compute-sanitizer >/dev/null || { echo "compute-sanitizer not found"; return 1; }
  local rc=0 subset="forward_matches and (float16 or float32) or backward_matches or dropout_mask or misaligned or tuned_gemms or gemm_tuning"
  # No --leak-check: torch keeps tensors and its cached blocks until exit (all 490 "leaks" of the
  # first run were torch's cudaMalloc); the pool's balance is asserted by the tests instead.
  compute-sanitizer --tool memcheck --error-exitcode 99 --target-processes all \
    "$python" -m pytest -q -p no:cacheprovider tests/test_gpu.py tests/test_gpu_capture.py -k "$subset" || rc=1
  compute-sanitizer --tool memcheck --error-exitcode 99 --target-processes all \
    "$python" -m pytest -q -p no:cacheprovider tests/test_gpu_sketch.py -k "application and float32" || rc=1
  # Kernels with shared memory or inter-thread communication: the bias-gradient slabs, FWHT.
  compute-sanitizer --tool racecheck --error-exitcode 99 --target-processes all \
    "$python" -m pytest -q -p no:cacheprovider tests/test_gpu.py tests/test_gpu_sketch.py \
    -k "backward_matches and float32 or application and srht and float32" || rc=1
  compute-sanitizer --tool synccheck --error-exitcode 99 --target-processes all \
    "$python" -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "backward_matches and float32" || rc=1
  # Issue 40's Performer kernels: shared-memory tiles, block-owned states, the tie list's atomics.
  local performer="match_the_float64 and float32 and (300x300 or 129x129) or ties"
  for tool in memcheck racecheck synccheck; do
    compute-sanitizer --tool $tool --error-exitcode 99 --target-processes all \
      "$python" -m pytest -q -p no:cacheprovider tests/test_gpu_performer.py -k "$performer" || rc=1
  done
  return $rc
}

bench() {
  # Not --benchmark-only: the achieved-rate report is a plain test. Then any rank against its
  # aligned neighbour (issue 38: the padded inner width).
  "$python" -m pytest bench/test_bench_gpu.py -q -p no:cacheprovider --benchmark-json="$out/gpu-$date_tag.json"
  local rc=$?
  "$python" -m pytest bench/test_bench_ranks.py -k gpu -q -p no:cacheprovider \
    --benchmark-json="$out/gpu-ranks-$date_tag.json" || rc=1
  # Issue 40: Performer attention against the exact layer (SDPA flash/mem-efficient, bf16 and fp32).
  "$python" -m pytest bench/test_bench_performer.py -k cuda --benchmark-only -q -p no:cacheprovider \
    --benchmark-json="$out/gpu-performer-$date_tag.json" || rc=1
  return $rc
}

llm() {  # issue 38: the LLaMA-shaped model, dense vs compressed, prefill/train/decode (eager and graphs)
  "$python" bench/llm_speed.py --preset gpu --rounds 3 --out "$out/llm-speed-$date_tag"
}

profile() {
  "$python" bench/gpu/where_time_goes.py
}

host() {  # not in the default steps: a long table of where a training step's host time goes
  "$python" bench/gpu/host_profile.py
}

export python out dry date_tag
export -f facts wheels build tests sanitize bench llm profile host

for name in $steps; do
  case $name in
    facts) step facts facts ;;
    wheels) step wheels wheels; export PYTHONPATH=/tmp/sketchcore-site${PYTHONPATH:+:$PYTHONPATH} ;;
    build|tests|sanitize|bench|llm|profile|host)
      if has_gpu; then step "$name" "$name"; else skip "$name" "no GPU here (DRY_RUN=$dry)"; fi ;;
    *) echo "unknown step '$name' (facts wheels build tests sanitize bench llm profile host)"; exit 2 ;;
  esac
done

if [ "$dry" = 1 ]; then
  # What can be checked without a GPU: the GPU tests and benchmarks collect and skip cleanly.
  step collect "$python" -m pytest -q -p no:cacheprovider -m gpu tests bench/test_bench_gpu.py bench/test_bench_performer.py -rs
  step llm_plan "$python" bench/llm_speed.py --preset gpu --dry-run --device cpu
fi

echo
echo "sketchcore GPU check, $(date -u +%FT%TZ), logs in $out"
printf '%-10s %-4s %6s  %s\n' step res time "last line of note"
printf '%s\n' "${summary[@]}"
grep -q " FAIL " <<<"$(printf '%s\n' "${summary[@]}")" && exit 1
exit 0
