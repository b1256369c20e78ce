"""Formulas as MathML, written into the HTML at build time.

Sphinx's default renderer leaves the LaTeX in the page for MathJax, loaded from a CDN: opened
without network access (a local build, an intranet mirror), a page shows raw ``\\[ y = ... \\]``.
MathML is rendered by every current browser itself, so the pages need no script and no network.
``latex2mathml`` (pure Python, no dependencies) converts the LaTeX; a formula it cannot read
fails the build, naming the formula, rather than shipping raw LaTeX.
"""
from __future__ import annotations

from typing import Any

from docutils import nodes
from latex2mathml.converter import convert
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError


def _mathml(latex: str, display: str) -> str:
    try:
        return convert(latex, display=display)
    except Exception as error:  # latex2mathml raises its own exception types per construct
        raise ExtensionError(f"formula cannot be rendered as MathML: {latex!r} ({error})") from error


def _visit_inline(self: Any, node: nodes.math) -> None:
    self.body.append(self.starttag(node, "span", "", CLASS="math"))
    self.body.append(_mathml(node.astext(), "inline"))
    self.body.append("</span>")
    raise nodes.SkipNode


def _visit_block(self: Any, node: nodes.math_block) -> None:
    self.body.append(self.starttag(node, "div", CLASS="math"))
    if node.get("number"):
        self.body.append(f'<span class="eqno">({node["number"]})</span>')
    self.body.append(_mathml(node.astext(), "block"))
    self.body.append("</div>\n")
    raise nodes.SkipNode


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_html_math_renderer("mathml", (_visit_inline, None), (_visit_block, None))
    return {"parallel_read_safe": True, "parallel_write_safe": True}
