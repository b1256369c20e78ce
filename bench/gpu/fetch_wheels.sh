#!/usr/bin/env bash
# Downloads, on a machine with PyPI, the wheels the GPU machine lacks into .whl/ (git-ignored),
# for its Python (3.12, x86-64 Linux). bench/gpu/run.sh installs them from there; carry .whl
# along with the working tree. Usage: bash bench/gpu/fetch_wheels.sh [PYTHON_VERSION]
set -euo pipefail
cd "$(dirname "$0")/../.."
version=${1:-3.12}
# The exact pin of pyproject.toml: scipy-openblas32's README asks for one.
pin=$(python3 - <<'PY'
import re
text = open("pyproject.toml").read()
print(re.search(r'"(scipy-openblas32==[^"]+)"', text).group(1))
PY
)
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$version" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "$pin"
# The version provider of a --no-build-isolation build (pyproject.toml: setuptools-scm; pure Python).
python3 -m pip download -q --no-deps --only-binary=:all: -d .whl setuptools-scm vcs-versioning
ls -la .whl
