"""Turns a source tree into the CUDA wheel's source: `python tools/wheels/variant.py cu13 [DIR]`.

Rewrites DIR/pyproject.toml (default: the current directory) so that the wheel
- is named sketchcore-cu12 / sketchcore-cu13 (the import name stays `sketchcore`),
- depends on NVIDIA's cuBLAS pip package of that CUDA major (cuBLASLt is loaded from it at run
  time: python/sketchcore/_cublaslt.py),
- builds the CUDA backend (SKETCHCORE_CUDA=ON) for the release's GPU architectures: cubins for
  sm_80, sm_90 and sm_100, and PTX of compute_100 that newer GPUs compile at load time.
Run it on a copy or a CI checkout, never on a working tree you commit from. `--cuda-architectures`
overrides the list. The toolkit's major version must match the suffix: the CMake build stops
otherwise (SKETCHCORE_CUDA_REQUIRE_MAJOR, cmake/SketchcoreCuda.cmake).
"""
from __future__ import annotations

import argparse
import os
import sys

RELEASE_CUDA_ARCHITECTURES = "80-real;90-real;100"   # CMake: "100" = sm_100 cubin + compute_100 PTX
VARIANTS = {"cu12": ("nvidia-cublas-cu12", 12), "cu13": ("nvidia-cublas>=13,<14", 13)}


def _replace_once(text: str, old: str, new: str, where: str) -> str:
    count = text.count(old)
    if count != 1:
        raise SystemExit(f"variant.py: {where}: expected exactly one {old!r}, found {count}")
    return text.replace(old, new)


def rewrite(text: str, variant: str, architectures: str) -> str:
    """pyproject.toml's text for `variant`."""
    requirement, major = VARIANTS[variant]
    text = _replace_once(text, 'name = "sketchcore"\n', f'name = "sketchcore-{variant}"\n', "[project] name")
    text = _replace_once(text, 'dependencies = [\n', f'dependencies = [\n  "{requirement}",\n', "[project] dependencies")
    text = _replace_once(text, 'SKETCHCORE_CUDA = { env = "SKETCHCORE_CUDA", default = "AUTO" }\n',
                         f'SKETCHCORE_CUDA = "ON"\nSKETCHCORE_CUDA_REQUIRE_MAJOR = "{major}"\n'
                         f'CMAKE_CUDA_ARCHITECTURES = "{architectures}"\n',
                         "[tool.scikit-build.cmake.define] SKETCHCORE_CUDA")
    return text


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variant", choices=sorted(VARIANTS))
    parser.add_argument("directory", nargs="?", default=".")
    parser.add_argument("--cuda-architectures", default=RELEASE_CUDA_ARCHITECTURES,
                        help=f"CMAKE_CUDA_ARCHITECTURES (default: the release's {RELEASE_CUDA_ARCHITECTURES})")
    args = parser.parse_args(argv)
    path = os.path.join(args.directory, "pyproject.toml")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    with open(path, "w", encoding="utf-8") as f:
        f.write(rewrite(text, args.variant, args.cuda_architectures))
    print(f"variant.py: {path}: sketchcore-{args.variant}, CUDA {VARIANTS[args.variant][1]}, "
          f"architectures {args.cuda_architectures}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
