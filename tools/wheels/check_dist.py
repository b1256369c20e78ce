"""Checks what a release artifact contains: `python tools/wheels/check_dist.py FILE... [options]`.

For a wheel: its size (PyPI takes files up to 100 MB), its name and version, the files a user
needs (the extensions, libsketchcore, the C++ headers, the CMake package config, the license),
none it must not ship (tests, Cython sources, build trees, object files, a bundled OpenBLAS or
CUDA library: both come from their own pip packages), no path of the machine that built it, and
for a CUDA wheel (sketchcore-cuNN) its dependency on NVIDIA's cuBLAS package and, where
cuobjdump is available, its GPU code (--sm, --ptx). For an sdist: the sources a build needs and no
build output. Prints one line per artifact; exits 1 naming every problem found.
"""
from __future__ import annotations

import argparse
import email.parser
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

PYPI_LIMIT_MB = 100.0

WHEEL_REQUIRED = [
    "sketchcore/__init__.py", "sketchcore/py.typed", "sketchcore/_cublaslt.py",
    "sketchcore/_ops.*.so", "sketchcore/_runtime.*.so", "sketchcore/_jax_ffi.so",
    "sketchcore/lib/libsketchcore.so",
    "sketchcore/include/sketchcore/sketchcore.hpp", "sketchcore/include/sketchcore/version.hpp",
    "sketchcore/lib/cmake/sketchcore/sketchcoreConfig.cmake",
    "sketchcore/lib/cmake/sketchcore/sketchcoreConfigVersion.cmake",
    "sketchcore/lib/cmake/sketchcore/sketchcoreTargets.cmake",
    "*.dist-info/licenses/LICENSE", "*.dist-info/METADATA",
]
WHEEL_FORBIDDEN = [
    "tests/*", "*/tests/*", "*/test_*.py", "*conftest.py", "*.pyx", "*.pxd", "*.o", "*.a", "*.cpp", "*.cu",
    "*/_bridge.hpp", "*/dlpack_abi.h", "*__pycache__*", "*CMakeCache.txt", "*CMakeFiles*", "*.ninja",
    "build/*", "*/.hypothesis/*", "*libscipy_openblas*", "*libcublas*", "*libcudart*", "*.libs/*",
]
SDIST_REQUIRED = ["pyproject.toml", "CMakeLists.txt", "LICENSE", "README.md", "PKG-INFO",
                  "cmake/sketchcoreConfig.cmake.in", "src/cpp/include/sketchcore/sketchcore.hpp",
                  "src/cuda/cublaslt_api.cu", "python/sketchcore/__init__.py", "python/sketchcore/_ops.pyx",
                  "examples/CMakeLists.txt", "tests/core/test_package.py"]
SDIST_FORBIDDEN = ["build/*", ".hypothesis/*", ".benchmarks/*", ".whl/*", "dist/*", "wheelhouse/*",
                   "docs/_build/*", "*.so", "*.o", "*__pycache__*", ".git/*"]
# Paths of build machines: cibuildwheel's container, pip/build's isolated environments.
BUILD_PATHS = ["/project/", "/tmp/pip-", "build-env-", "build-via-sdist-", "/home/runner/"]


def _members(path: str) -> tuple[list[str], dict[str, bytes]]:
    """The artifact's file names (relative to the sdist's top folder) and their contents."""
    contents: dict[str, bytes] = {}
    if path.endswith(".whl"):
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            for name in names:
                contents[name] = archive.read(name)
        return names, contents
    with tarfile.open(path) as archive:
        members = [m for m in archive.getmembers() if m.isfile()]
        top = os.path.commonprefix([m.name.split("/")[0] + "/" for m in members])
        names = [m.name[len(top):] for m in members]
        for member, name in zip(members, names):
            stream = archive.extractfile(member)
            contents[name] = stream.read() if stream else b""
    return names, contents


def _matching(names: list[str], pattern: str) -> list[str]:
    return [n for n in names if fnmatch.fnmatchcase(n, pattern)]


def _metadata(contents: dict[str, bytes], wheel: bool) -> email.message.Message:
    key = next(n for n in contents if (n.endswith(".dist-info/METADATA") if wheel else n == "PKG-INFO"))
    return email.parser.Parser().parsestr(contents[key].decode("utf-8"))


def _gpu_code(library: bytes, cuobjdump: str) -> tuple[set[str], set[str]]:
    """(cubin architectures, PTX architectures) of a shared library, read by cuobjdump."""
    with tempfile.NamedTemporaryFile(suffix=".so") as f:
        f.write(library)
        f.flush()
        sass = subprocess.run([cuobjdump, "--list-elf", f.name], capture_output=True, text=True).stdout
        ptx = subprocess.run([cuobjdump, "--list-ptx", f.name], capture_output=True, text=True).stdout
    return set(re.findall(r"\.(sm_\d+[a-z]?)\.cubin", sass)), set(re.findall(r"\.(sm_\d+[a-z]?)\.ptx", ptx))


def check(path: str, args: argparse.Namespace) -> list[str]:
    problems: list[str] = []
    wheel = path.endswith(".whl")
    size_mb = os.path.getsize(path) / 1e6
    limit = args.max_mb if args.max_mb is not None else PYPI_LIMIT_MB
    if size_mb > limit:
        problems.append(f"size: expected at most {limit} MB, got {size_mb:.1f} MB")
    names, contents = _members(path)
    for pattern in WHEEL_REQUIRED if wheel else SDIST_REQUIRED:
        if not _matching(names, pattern):
            problems.append(f"missing: expected a file matching {pattern}")
    for pattern in WHEEL_FORBIDDEN if wheel else SDIST_FORBIDDEN:
        for name in _matching(names, pattern)[:5]:
            problems.append(f"must not ship: {name} (matches {pattern})")
    # Build paths in what a wheel installs (an sdist is source: its build outputs are checked above).
    for name, data in contents.items() if wheel else ():
        for text in BUILD_PATHS + list(args.forbid_string):
            if text.encode() in data and not name.endswith(".dist-info/RECORD"):
                problems.append(f"build path: {name} contains {text!r}")
    meta = _metadata(contents, wheel)
    if args.name and meta["Name"] != args.name:
        problems.append(f"name: expected {args.name}, got {meta['Name']}")
    if args.version and meta["Version"] != args.version:
        problems.append(f"version: expected {args.version}, got {meta['Version']}")
    cuda = re.fullmatch(r"sketchcore-cu(\d+)", meta["Name"] or "")
    requires = meta.get_all("Requires-Dist") or []
    if cuda:
        package = "nvidia-cublas" if int(cuda.group(1)) >= 13 else f"nvidia-cublas-cu{cuda.group(1)}"
        if not any(re.match(rf"{re.escape(package)}\b(?!-)", r) for r in requires):
            problems.append(f"dependencies: expected {package} for a CUDA {cuda.group(1)} wheel, got {requires}")
    elif any(r.startswith("nvidia-") for r in requires):
        problems.append(f"dependencies: a CPU wheel must not depend on NVIDIA packages, got {requires}")
    library = contents.get("sketchcore/lib/libsketchcore.so")
    cuobjdump = shutil.which("cuobjdump")
    if wheel and library is not None and (args.sm or args.ptx):
        if not cuobjdump:
            problems.append("GPU code: --sm/--ptx given but cuobjdump is not on PATH")
        else:
            sass, ptx = _gpu_code(library, cuobjdump)
            if set(args.sm) != sass:
                problems.append(f"GPU code: expected cubins for {sorted(args.sm)}, got {sorted(sass)}")
            if set(args.ptx) != ptx:
                problems.append(f"GPU code: expected PTX for {sorted(args.ptx)}, got {sorted(ptx)}")
    kind = "CUDA " + cuda.group(1) + " wheel" if cuda else "wheel" if wheel else "sdist"
    print(f"{os.path.basename(path)}: {kind}, {size_mb:.2f} MB, {len(names)} files, "
          f"{'OK' if not problems else f'{len(problems)} problem(s)'}")
    return problems


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="wheels (.whl) and sdists (.tar.gz)")
    parser.add_argument("--name", help="expected distribution name (sketchcore, sketchcore-cu13, ...)")
    parser.add_argument("--version", help="expected version")
    parser.add_argument("--max-mb", type=float, help=f"size limit in MB (default {PYPI_LIMIT_MB}, PyPI's)")
    parser.add_argument("--forbid-string", action="append", default=[],
                        help="a path (e.g. the build tree) no file may contain; repeatable")
    parser.add_argument("--sm", action="append", default=[], help="expected cubin architecture, e.g. sm_80")
    parser.add_argument("--ptx", action="append", default=[], help="expected PTX architecture, e.g. sm_100")
    args = parser.parse_args(argv)
    failed = False
    for path in args.files:
        for problem in check(path, args):
            print(f"  {problem}")
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
