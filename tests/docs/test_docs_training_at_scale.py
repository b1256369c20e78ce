"""Runs the code of docs/tutorials/training_at_scale.md as the script it is: its blocks marked
``# docs: distributed``, top to bottom, on 2 processes (gloo), as ``torchrun --nproc-per-node 2``
would; a traceback names the Markdown page's lines."""
from __future__ import annotations

import pathlib
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "parallel" / "distributed"))

from dist_launcher import run_world  # noqa: E402
from test_docs_tutorials import TUTORIALS, python_blocks  # noqa: E402

PAGE = TUTORIALS / "training_at_scale.md"


def page_script(page: pathlib.Path) -> str:
    """A module whose ``run_page()`` executes the page's distributed blocks in one namespace,
    padded so that line numbers are the page's."""
    blocks = [b for b in python_blocks(page.read_text(encoding="utf-8")) if b.distributed]
    lines: list[str] = []
    for block in blocks:
        lines += [""] * (block.line - 1 - len(lines)) + block.code.split("\n")
    return (f"SOURCE = {chr(10).join(lines)!r}\n\n"
            f"def run_page():\n"
            f"    exec(compile(SOURCE, {str(page)!r}, 'exec'), {{'__name__': '__docs__'}})\n")


def test_page_has_distributed_code() -> None:
    blocks = python_blocks(PAGE.read_text(encoding="utf-8"))
    assert sum(b.distributed for b in blocks) >= 5 and all(b.distributed for b in blocks)


def test_training_at_scale_runs_on_2_processes(tmp_path: pathlib.Path) -> None:
    (tmp_path / "training_at_scale_page.py").write_text(page_script(PAGE), encoding="utf-8")
    output = run_world(2, "training_at_scale_page", ["run_page"], path=str(tmp_path))
    assert "rank 0: run_page ok" in output
