"""Runs the Python code of every tutorial page (docs/tutorials/*.md) and of the README, so that an
API change that breaks an example fails CI.

Each page is one test: its ```python blocks run top to bottom in one namespace, in a temporary
working directory. What is not run:

* blocks whose first line is ``# docs: requires-gpu`` — unless sketchcore sees a CUDA device;
* blocks whose first line is ``# docs: distributed``: together they are one script that
  tests/docs/test_docs_training_at_scale.py runs on 2 processes;
* blocks of any other fence (```bash, ```cmake, ```cpp, ```{code-block} python, ...);
* a whole page whose code imports an optional framework (torch, jax, cupy) that is not
  installed: it is skipped, naming the module. Any other error fails the test, with the
  traceback pointing at the line of the Markdown page.
"""
from __future__ import annotations

import importlib.util
import os
import pathlib
import re
from dataclasses import dataclass

import pytest

import sketchcore

TUTORIALS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "tutorials"
GPU_MARKER = "# docs: requires-gpu"
#: First line of blocks that form a script run on several processes (tests/docs/test_docs_training_at_scale.py).
DISTRIBUTED_MARKER = "# docs: distributed"
OPTIONAL_MODULES = ("torch", "jax", "jaxlib", "cupy")
_FENCE = re.compile(r"^(`{3,}|~{3,})\s*(\S*)")


@dataclass
class Block:
    line: int  # 1-based line of the Markdown file where the code starts
    code: str

    @property
    def first_line(self) -> str:
        return self.code.lstrip("\n").split("\n", 1)[0].strip()

    @property
    def needs_gpu(self) -> bool:
        return self.first_line == GPU_MARKER

    @property
    def distributed(self) -> bool:
        return self.first_line == DISTRIBUTED_MARKER


def _closes(line: str, fence: str) -> bool:
    """Whether `line` closes a block opened by `fence` (the same character, at least as many)."""
    stripped = line.strip()
    return len(stripped) >= len(fence) and set(stripped) == {fence[0]}


def python_blocks(text: str) -> list[Block]:
    """The ```python (or ```py) fenced blocks of a Markdown page, in order."""
    blocks: list[Block] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        fence, info = match.group(1), match.group(2)
        start = i + 1
        i += 1
        while i < len(lines) and not _closes(lines[i], fence):
            i += 1
        if info in ("python", "py"):
            blocks.append(Block(start + 1, "\n".join(lines[start:i])))
        i += 1
    return blocks


def run_page(path: pathlib.Path, gpu: bool) -> int:
    """Runs the page's blocks in one namespace; returns how many ran."""
    namespace: dict[str, object] = {"__name__": "__docs__"}
    ran = 0
    for block in python_blocks(path.read_text(encoding="utf-8")):
        if (block.needs_gpu and not gpu) or block.distributed:
            continue
        # Padding with blank lines makes tracebacks name the Markdown file's own line numbers.
        source = "\n" * (block.line - 1) + block.code
        exec(compile(source, str(path), "exec"), namespace)  # noqa: S102 - the project's own docs
        ran += 1
    return ran


PAGES = sorted(TUTORIALS.glob("*.md")) + [TUTORIALS.parent.parent / "README.md"]


def test_tutorials_exist() -> None:
    names = {page.name for page in PAGES}
    for expected in ("getting_started.md", "from_panther.md", "performance.md", "memory.md", "cpp.md"):
        assert expected in names


@pytest.mark.parametrize("page", PAGES, ids=[page.stem for page in PAGES])  # README: "README"
def test_tutorial_code_runs(page: pathlib.Path, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    blocks = python_blocks(page.read_text(encoding="utf-8"))
    if not blocks:
        pytest.skip(f"{page.name} has no Python code")
    try:
        ran = run_page(page, gpu=sketchcore.cuda_device_count() > 0)
    except ModuleNotFoundError as error:
        root = (error.name or "").split(".")[0]
        if root in OPTIONAL_MODULES and importlib.util.find_spec(root) is None:
            pytest.skip(f"{page.name} needs {root}, which is not installed")
        raise
    assert ran > 0 or all(block.needs_gpu or block.distributed for block in blocks)


def test_extractor_honours_fences_and_markers(tmp_path: pathlib.Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# t\n\n```python\nx = 1\n```\n\n```bash\nexit 1\n```\n\n"
                    "```python\n# docs: requires-gpu\nraise RuntimeError('gpu')\n```\n\n"
                    "````{code-block} python\nraise RuntimeError('shown only')\n````\n\n"
                    "```python\ny = x + 1\nassert y == 2\n```\n", encoding="utf-8")
    blocks = python_blocks(page.read_text())
    assert [b.line for b in blocks] == [4, 12, 21]
    assert [b.needs_gpu for b in blocks] == [False, True, False]
    assert run_page(page, gpu=False) == 2
    with pytest.raises(RuntimeError, match="gpu"):
        run_page(page, gpu=True)


def test_errors_point_at_the_markdown_line(tmp_path: pathlib.Path) -> None:
    page = tmp_path / "broken.md"
    page.write_text("# t\n\ntext\n\n```python\na = 1\nb = undefined_name\n```\n", encoding="utf-8")
    with pytest.raises(NameError) as info:
        run_page(page, gpu=False)
    frames = [f for f in info.traceback if str(f.path) == str(page)]
    assert frames and frames[-1].lineno + 1 == 7
    assert os.path.exists(page)
