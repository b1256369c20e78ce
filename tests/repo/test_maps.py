"""The maps of the code stay true: every source file is named in the map of its folder, and every
folder in docs/layout.md.

A file's map is the nearest ``DEVNOTES.md`` above it (the folder's notes: what each file holds and
why it is built so), except under ``src/``, whose map is ``src/README.md``. A file counts as named
when its name, or its stem with ``.*`` (``lt_gemm.*`` for ``lt_gemm.cu`` and ``lt_gemm.cuh``),
stands in the map. A new file without a line in its map, or a renamed one whose line went stale,
fails here with the file and the map to edit.
"""
from __future__ import annotations

import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
MAPPED_TREES = ("src", "python", "bench", "tools", "cmake", "examples", "tests")
SOURCE_SUFFIXES = {".py", ".pyx", ".pxd", ".pyi", ".hpp", ".h", ".cpp", ".cu", ".cuh", ".cmake", ".in", ".sh",
                   ".tsv", ".txt"}
LAYOUT = ROOT / "docs" / "layout.md"


def _tracked() -> list[pathlib.Path]:
    try:
        listed = subprocess.run(["git", "ls-files", *MAPPED_TREES], cwd=ROOT, capture_output=True, text=True,
                                check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout (an sdist or installed copy): the maps are checked in the repository")
    return [pathlib.Path(path) for path in listed if (ROOT / path).exists()]


def _is_source(path: pathlib.Path) -> bool:
    if path.parts[:2] == ("bench", "results") or path.name.startswith("test_") or path.name == "conftest.py":
        return False  # results are data; tests are found by their folder, which the tests' map names
    return path.suffix in SOURCE_SUFFIXES or path.name == "CMakeLists.txt"


def map_of(path: pathlib.Path) -> pathlib.Path:
    if path.parts[0] == "src":
        return pathlib.Path("src", "README.md")
    for folder in path.parents:
        if (ROOT / folder / "DEVNOTES.md").exists():
            return folder / "DEVNOTES.md"
    return pathlib.Path("docs", "layout.md")


def is_named(path: pathlib.Path, text: str) -> bool:
    names = (path.name, path.stem + ".*")
    return any(re.search(r"(?<![\w.-])" + re.escape(name) + r"(?![\w-])", text) for name in names) or \
        str(path) in text


def test_every_source_file_is_named_in_its_folder_map():
    texts: dict[pathlib.Path, str] = {}
    unnamed = []
    for path in _tracked():
        if not _is_source(path):
            continue
        where = map_of(path)
        text = texts.setdefault(where, (ROOT / where).read_text(encoding="utf-8"))
        if not is_named(path, text):
            unnamed.append(f"{path} (map: {where})")
    assert not unnamed, "files no map names:\n  " + "\n  ".join(unnamed)


def _folder_is_named(folder: pathlib.Path, layout: str) -> bool:
    """Named in docs/layout.md by its path, or in its parent's map by its name (``distributed/``)."""
    if f"{folder}/" in layout or f"`{folder}`" in layout:
        return True
    parent_map = map_of(folder)
    return parent_map != LAYOUT.relative_to(ROOT) and \
        f"{folder.name}/" in (ROOT / parent_map).read_text(encoding="utf-8")


def test_every_folder_is_named_in_the_layout_or_its_parent_map():
    layout = LAYOUT.read_text(encoding="utf-8")
    folders = {path.parent for path in _tracked() if _is_source(path) or path.suffix == ".py"}
    missing = sorted(str(folder) for folder in folders if str(folder) != "." and not _folder_is_named(folder, layout))
    assert not missing, f"folders neither {LAYOUT.relative_to(ROOT)} nor their parent's notes name: {missing}"


def test_the_name_rule_tells_a_name_from_a_longer_one():
    text = "`lt_gemm.*` and `cpu/blas.cpp` and `_ops.pyi`"
    assert is_named(pathlib.Path("src/cuda/lt_gemm.cuh"), text)
    assert is_named(pathlib.Path("src/cpp/cpu/blas.cpp"), text)
    assert not is_named(pathlib.Path("src/cpp/cpu/las.cpp"), text)
    assert not is_named(pathlib.Path("python/sketchcore/ops.pyi"), text)
    assert not is_named(pathlib.Path("python/sketchcore/_ops.pyx"), text)


FIGURE_OR_ISSUE = re.compile(r"issue \d+|\d(\.\d+)? ?(µs|ms|ns)\b|\d(\.\d+)?×(?! ?\d)|\d ?(GB/s|GFLOP/s)")


def module_docstring(path: pathlib.Path) -> str:
    """The docstring at the top of a .py or .pyx file (after comment lines), or ""."""
    match = re.match(r'\s*(?:#[^\n]*\n\s*)*r?"""(.*?)"""', path.read_text(encoding="utf-8"), re.S)
    return match.group(1) if match else ""


def test_module_docstrings_carry_no_benchmark_figures_or_issue_numbers():
    """Measured figures go stale in code; they live in docs/performance_results.md, which a module cites."""
    package = ROOT / "python" / "sketchcore"
    found = {str(path.relative_to(ROOT)): hit.group(0) for path in sorted(package.rglob("*"))
             if path.suffix in (".py", ".pyx") for hit in [FIGURE_OR_ISSUE.search(module_docstring(path))] if hit}
    assert not found, f"module docstrings with figures or issue numbers: {found}"


def test_the_figure_rule_catches_a_timing_and_an_issue_and_spares_a_shape():
    assert FIGURE_OR_ISSUE.search("ran in 25.4 ms") and FIGURE_OR_ISSUE.search("see issue 25")
    assert FIGURE_OR_ISSUE.search("2.5× faster")
    assert not FIGURE_OR_ISSUE.search("a 1×1 convolution, a 3 × 3 kernel, (out × 2Tk) and shapes (N, d_in)")


#: Packages the tests import (optional ones included) and the standard library's top-level names.
IMPORTED_PACKAGES = {"torch", "jax", "jaxlib", "numpy", "cupy", "transformers", "optuna", "pandas", "sklearn",
                     "scipy", "matplotlib", "hypothesis", "pytest", "sphinx", "latex2mathml", "sketchcore"}


def test_no_test_folder_shadows_a_package_the_tests_import():
    """tests/ is on sys.path (conftest.py's folder): a folder tests/torch would be imported as ``torch``
    (a namespace package) wherever torch is not installed, and importorskip would not skip."""
    import sys

    names = IMPORTED_PACKAGES | set(sys.stdlib_module_names)
    folders = {p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    # tests/typing is safe: the standard library's typing is always installed, and a module found
    # anywhere on sys.path wins over a namespace folder
    shadowing = sorted(folders & names - {"typing"})
    assert not shadowing, f"test folders named like packages the tests import: {shadowing}"
