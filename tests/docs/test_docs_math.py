"""The documentation's formulas render without network access: MathML written at build time.

A small site is built with the docs' own configuration of math (MyST's dollar math, the
``mathml_render`` extension of docs/_ext) from the front page's formulas, and checked by
tools/check_docs_html.py, the checker .ci/run applies to the whole built site. The same site
built with Sphinx's default renderer (MathJax from a CDN) must fail that checker: the check can fail.
"""
from __future__ import annotations

import importlib.util
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sphinx_application = pytest.importorskip("sphinx.application", reason="sphinx is in the test extras")


def _checker():
    spec = importlib.util.spec_from_file_location("check_docs_html", ROOT / "tools" / "check_docs_html.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _front_page_formulas() -> list[str]:
    text = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    formulas = re.findall(r"^\$\$.*?\$\$$", text, flags=re.M | re.S)
    assert formulas, "docs/index.md has no $$ formula: update this test with the front page"
    return formulas


def _build(tmp_path: pathlib.Path, renderer: str) -> pathlib.Path:
    source = tmp_path / "src"
    source.mkdir()
    extensions = ["myst_parser"] + (["mathml_render"] if renderer == "mathml" else [])
    (source / "conf.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT / 'docs' / '_ext')!r})\n"
        f"extensions = {extensions!r}\n"
        "myst_enable_extensions = ['dollarmath']\n"
        f"html_math_renderer = {renderer!r}\n")
    body = "\n\n".join(_front_page_formulas())
    (source / "index.md").write_text(f"# Formulas\n\nInline: $x S_t U_t$.\n\n{body}\n")
    out = tmp_path / "html"
    app = sphinx_application.Sphinx(str(source), str(source), str(out), str(tmp_path / "doctrees"), "html",
                                     status=None, warning=None, freshenv=True, warningiserror=True)
    app.build()
    return out


def test_formulas_are_mathml_and_the_site_loads_no_mathjax(tmp_path):
    site = _build(tmp_path, "mathml")
    assert _checker().site_problems(site) == []
    page = (site / "index.html").read_text(encoding="utf-8")
    assert page.count("<math") == 1 + len(_front_page_formulas())
    assert "<mi>S</mi>" in page  # the inline formula's symbols are MathML elements
    assert "&#x02211;" in page or "∑" in page  # the front page's sum sign


def test_the_checker_rejects_the_default_mathjax_site(tmp_path):
    problems = _checker().site_problems(_build(tmp_path, "mathjax"))
    assert any("raw LaTeX" in problem for problem in problems)
    assert any("loads MathJax" in problem for problem in problems)
    assert any("no MathML" in problem for problem in problems)
