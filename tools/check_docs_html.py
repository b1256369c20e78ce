"""Checks a built documentation site for formulas that a reader offline would see as raw LaTeX.

Usage: ``python tools/check_docs_html.py docs/_build/html`` (.ci/run runs it after the Sphinx build;
tests/docs/test_docs_math.py runs the same checks on a small site built with the same extension).
Exit status 1 and one line per problem when a page holds LaTeX delimiters outside code, or loads
MathJax (a CDN script: nothing renders offline), or when the front page has no MathML at all.
"""
from __future__ import annotations

import html.parser
import pathlib
import sys

RAW_LATEX = ("\\[", "\\]", "\\(", "\\)", "$$", "\\mathrm", "\\sum", "\\frac")


class _TextOutsideCode(html.parser.HTMLParser):
    """Collects the text a reader sees outside <pre>/<code>/<script>/<style>, and the scripts' sources."""

    _SKIPPED = {"pre", "code", "script", "style", "math"}

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0
        self.text: list[str] = []
        self.scripts: list[str] = []
        self.math_elements = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "script":
            self.scripts.append(dict(attrs).get("src") or "")
        if tag == "math":
            self.math_elements += 1
        if tag in self._SKIPPED:
            self.depth += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIPPED and self.depth:
            self.depth -= 1

    def handle_data(self, data: str) -> None:
        if not self.depth:
            self.text.append(data)


def page_problems(page: pathlib.Path) -> tuple[list[str], int]:
    """The problems of one HTML page, and how many <math> elements it holds."""
    parser = _TextOutsideCode()
    parser.feed(page.read_text(encoding="utf-8"))
    text = "".join(parser.text)
    problems = [f"{page}: raw LaTeX {token!r} in the page's text" for token in RAW_LATEX if token in text]
    problems += [f"{page}: loads MathJax ({src})" for src in parser.scripts if "mathjax" in src.lower()]
    return problems, parser.math_elements


def site_problems(site: pathlib.Path) -> list[str]:
    """The problems of every page of a built site; the front page must hold MathML."""
    problems: list[str] = []
    for page in sorted(site.rglob("*.html")):
        found, math_elements = page_problems(page)
        problems += found
        if page == site / "index.html" and math_elements == 0:
            problems.append(f"{page}: the front page has no MathML formula")
    if not (site / "index.html").exists():
        problems.append(f"{site}: no index.html (is this a built site?)")
    return problems


if __name__ == "__main__":
    found = site_problems(pathlib.Path(sys.argv[1]))
    print("\n".join(found) or f"{sys.argv[1]}: formulas are MathML, no raw LaTeX, no MathJax")
    sys.exit(1 if found else 0)
