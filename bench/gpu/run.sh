#!/usr/bin/env bash
# One-command GPU check: build, test, sanitize and benchmark sketchcore's CUDA backend on a fresh
# GPU machine with no network (Python with torch, CuPy, nvcc, CMake, Ninja, scikit-build-core,
# Cython, pytest, pytest-benchmark, hypothesis preinstalled).
#
#   bash bench/gpu/run.sh OUTDIR            # everything
#   bash bench/gpu/run.sh --plan            # what it would run, each step's estimated device seconds
#                                           # and where the estimate comes from, how to split a slot
#   STEPS="facts build tests" bash bench/gpu/run.sh OUTDIR   # a subset, in this order
#   DRY_RUN=1 bash bench/gpu/run.sh OUTDIR  # on a CPU machine: runs what needs no GPU, says what it skipped
#   CPU_SUITE=0 ...                          # leave the cpu_suite step out of the default steps
#   TIMEOUT_tests=240 ...                    # a step's wall-clock limit in seconds (default 600)
#   SLOT_S=900 START_S=90 ...                # --plan: the device slot, a fresh machine's start
#
# Gated paths (CUDA code not yet verified on a GPU, sketchcore.gated_paths()): the tests step runs
# the GPU tests twice, with SKETCHCORE_CUDA_UNVERIFIED=0 (the defaults) and =1 (every gated path);
# the sanitize, bench, llm and pretrain steps run with them open (GATE=0 closes them), and say so in
# their logs.
#
# Wheels the machine lacks (scipy-openblas32 for its Python) are installed from .whl/ in the
# repository root, filled beforehand on a machine with PyPI by bench/gpu/fetch_wheels.sh
# (git-ignored; carry it along). Everything goes into OUTDIR: one log per step, the pytest JUnit
# XML, the benchmark JSON, environment facts, steps.tsv (step, result, seconds, date, device:
# commit it with the logs under bench/results/, and --plan estimates from it) and summary.txt.
# Each step prints its result and device seconds as it ends; the summary table comes last.
set -uo pipefail

plan_only=0
if [ "${1:-}" = --plan ]; then plan_only=1; shift; fi
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
python=${PYTHON:-python3}
dry=${DRY_RUN:-0}
default_steps="wheels facts build tests"
[ "${CPU_SUITE:-1}" = 1 ] && default_steps+=" cpu_suite"
default_steps+=" sanitize bench llm pretrain profile"
[ "$dry" = 1 ] && default_steps+=" collect llm_plan"
steps=${STEPS:-$default_steps}
all_steps="facts wheels build tests cpu_suite sanitize bench llm pretrain profile host collect llm_plan"
for name in $steps; do
  [[ " $all_steps " == *" $name "* ]] || { echo "unknown step '$name' ($all_steps)"; exit 2; }
done

if [ "$plan_only" = 1 ]; then
  limits=()
  for name in $all_steps; do limit_var="TIMEOUT_$name"; limits+=(--limit "$name=${!limit_var:-600}"); done
  exec "$python" bench/gpu/plan.py --steps "$steps" --slot "${SLOT_S:-900}" --start "${START_S:-90}" \
    --results "${RESULTS_DIR:-bench/results}" "${limits[@]}"
fi

out=${1:?usage: bench/gpu/run.sh [--plan] OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
date_tag=$(date -u +%Y-%m-%d)
gate=${GATE:-1}  # the gated paths in the sanitize, bench and llm steps: 1 open, 0 closed
summary=()
device_total=0
device_name=$( (nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || true) | head -n 1)
[ "$dry" = 1 ] || [ -z "$device_name" ] && device_name="no GPU${dry:+ (DRY_RUN=$dry)}"
printf '# step\tresult\tseconds\tdate\tdevice\n' >"$out/steps.tsv"
# A warm machine keeps what an earlier call's wheels step installed.
[ -d /tmp/sketchcore-site ] && export PYTHONPATH=/tmp/sketchcore-site${PYTHONPATH:+:$PYTHONPATH}

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
  local tail_line seconds=$((SECONDS - start)) result
  result=$([ $rc = 0 ] && echo ok || echo FAIL)
  device_total=$((device_total + seconds))
  # The note: the last pytest summary, sanitizer summary or Python error (not file names like errors.hpp).
  tail_line=$(grep -E "[0-9]+ (passed|failed|skipped|errors?)\b|ERROR SUMMARY|[A-Za-z]+Error: " "$out/$name.log" \
    | tail -n 1 | cut -c1-150)
  summary+=("$(printf '%-10s %-4s %6s %7s  %s' "$name" "$result" "$seconds" "$device_total" "$tail_line")")
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$result" "$seconds" "$date_tag" "$device_name" >>"$out/steps.tsv"
  echo "-- $name: $result in $seconds device-s (total $device_total s)${tail_line:+; $tail_line}"
  [ $rc = 0 ] || echo "   -> $name failed (exit $rc); see $out/$name.log"
  return 0
}

skip() {
  summary+=("$(printf '%-10s %-4s %6s %7s  %s' "$1" "skip" 0 "$device_total" "$2")")
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" skip 0 "$date_tag" "$device_name" >>"$out/steps.tsv"
  echo "-- $1: skipped ($2)"
}

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

# gpu_pass STATE: the GPU tests with every gated path closed (0) or open (1).
gpu_pass() {
  local per_test=()
  # A hung test fails alone instead of taking the step's whole limit (pytest-timeout, where installed).
  "$python" -c "import pytest_timeout" 2>/dev/null && per_test=(--timeout=120)
  local label=$([ "$1" = 1 ] && echo open || echo closed)
  echo "## GPU tests, gated paths $label: SKETCHCORE_CUDA_UNVERIFIED=$1"
  SKETCHCORE_CUDA_UNVERIFIED=$1 "$python" -c "import sketchcore; print(sketchcore.gated_paths())"
  SKETCHCORE_CUDA_UNVERIFIED=$1 "$python" -m pytest -m gpu -rs -q -p no:cacheprovider "${per_test[@]}" \
    --junitxml="$out/gpu-tests-gate-$label.xml" tests | tee "$out/gpu-tests-gate-$label.txt"
  return "${PIPESTATUS[0]}"
}

tests() {  # both sides of the gate (the gated tests also parametrize over it themselves)
  local rc=0
  gpu_pass 0 || rc=1
  gpu_pass 1 || rc=1
  # The step's note: both passes' pytest summaries.
  echo "gate closed: $(tail -n 1 "$out/gpu-tests-gate-closed.txt"); gate open: $(tail -n 1 "$out/gpu-tests-gate-open.txt")"
  return $rc
}

cpu_suite() {  # the GPU build must not change CPU behaviour
  local per_test=()
  "$python" -c "import pytest_timeout" 2>/dev/null && per_test=(--timeout=120)
  "$python" -m pytest -m "not gpu" -q -p no:cacheprovider "${per_test[@]}" --junitxml="$out/cpu-tests.xml" tests
}

sanitize() {
  command -v compute-sanitizer >/dev/null || { echo "compute-sanitizer not found"; return 1; }
  local rc=0 subset="forward_matches and (float16 or float32) or backward_matches or dropout_mask or misaligned or tuned_gemms or gemm_tuning"
  # No --leak-check: torch keeps tensors and its cached blocks until exit (all 490 "leaks" of the
  # first run were torch's cudaMalloc); the pool's balance is asserted by the tests instead.
  compute-sanitizer --tool memcheck --error-exitcode 99 --target-processes all \
    "$python" -m pytest -q -p no:cacheprovider tests/gpu/test_gpu.py tests/gpu/test_gpu_capture.py -k "$subset" || rc=1
  compute-sanitizer --tool memcheck --error-exitcode 99 --target-processes all \
    "$python" -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_sketch.py -k "application and float32" || rc=1
  # Kernels with shared memory or inter-thread communication: the bias-gradient slabs, FWHT.
  compute-sanitizer --tool racecheck --error-exitcode 99 --target-processes all \
    "$python" -m pytest -q -p no:cacheprovider tests/gpu/test_gpu.py tests/gpu/test_gpu_sketch.py \
    -k "backward_matches and float32 or application and srht and float32" || rc=1
  compute-sanitizer --tool synccheck --error-exitcode 99 --target-processes all \
    "$python" -m pytest -q -p no:cacheprovider tests/gpu/test_gpu.py -k "backward_matches and float32" || rc=1
  # Issue 40's Performer kernels: shared-memory tiles, block-owned states, the tie list's atomics.
  local performer="gate_open and (match_the_float64 and float32 and (300x300 or 129x129) or ties)"
  for tool in memcheck racecheck synccheck; do
    compute-sanitizer --tool $tool --error-exitcode 99 --target-processes all \
      "$python" -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_performer.py -k "$performer" || rc=1
  done
  # Issue 38's padded inner widths (packing, kp-wide scratch, copies out) and issue 39's pool
  # under two streams.
  for tool in memcheck racecheck; do
    compute-sanitizer --tool $tool --error-exitcode 99 --target-processes all \
      "$python" -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_padded_rank.py -k "gate_open and not lowrank" || rc=1
  done
  compute-sanitizer --tool memcheck --error-exitcode 99 --target-processes all \
    "$python" -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_streams.py || rc=1
  # Issue 49's int8 path: the block reductions of the row maxima, the intermediate rewritten in place,
  # strided rows (SKETCHCORE_CUDA_UNVERIFIED=cuda_int8_factors: the tests open it themselves too).
  for tool in memcheck racecheck; do
    SKETCHCORE_CUDA_UNVERIFIED=cuda_int8_factors compute-sanitizer --tool $tool --error-exitcode 99 \
      --target-processes all "$python" -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_int8.py \
      -k "strided or sizes or (references and silu)" || rc=1
  done
  return $rc
}

# with_gate COMMAND...: runs COMMAND with the gated paths as GATE says, and logs which.
with_gate() {
  echo "gated paths: SKETCHCORE_CUDA_UNVERIFIED=$gate"
  SKETCHCORE_CUDA_UNVERIFIED=$gate "$@"
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

llm() {  # issue 38: the LLaMA-shaped model, dense vs compressed, prefill/train/decode (eager and graphs);
  # issue 49: with GATE=1 also the low-rank model with int8 and fp8 factors (eager phases)
  "$python" bench/llm_speed.py --preset gpu --rounds 3 --out "$out/llm-speed-$date_tag"
}

pretrain() {  # issue 47: time to quality of CoLA pretraining, the gpu preset (sized to one device command)
  "$python" bench/pretrain.py --preset gpu --out "$out/gpu-pretrain-$date_tag"
}

profile() {
  "$python" bench/gpu/where_time_goes.py
}

host() {  # not in the default steps: a long table of where a training step's host time goes
  "$python" bench/gpu/host_profile.py
}

collect() {  # what can be checked without a GPU: the GPU tests and benchmarks collect and skip cleanly
  "$python" -m pytest -q -p no:cacheprovider -m gpu tests bench/test_bench_gpu.py bench/test_bench_performer.py -rs
}

llm_plan() {
  "$python" bench/llm_speed.py --preset gpu --dry-run --device cpu --out "$out/llm-plan"
}

export python out dry date_tag gate
export -f facts wheels build gpu_pass tests cpu_suite sanitize with_gate bench llm pretrain profile host collect \
  llm_plan

for name in $steps; do
  case $name in
    facts) step facts facts ;;
    wheels) step wheels wheels; export PYTHONPATH=/tmp/sketchcore-site${PYTHONPATH:+:$PYTHONPATH} ;;
    build|tests|cpu_suite|sanitize|profile|host)
      if has_gpu; then step "$name" "$name"; else skip "$name" "no GPU here (DRY_RUN=$dry)"; fi ;;
    bench|llm|pretrain)
      if has_gpu; then step "$name" with_gate "$name"; else skip "$name" "no GPU here (DRY_RUN=$dry)"; fi ;;
    collect|llm_plan) step "$name" "$name" ;;
  esac
done

{
  echo "sketchcore GPU check, $(date -u +%FT%TZ), $device_name, logs in $out"
  printf '%-10s %-4s %6s %7s  %s\n' step res device-s total "last line of note"
  printf '%s\n' "${summary[@]}"
} >"$out/summary.txt"
echo
cat "$out/summary.txt"
grep -q " FAIL " "$out/summary.txt" && exit 1
exit 0
