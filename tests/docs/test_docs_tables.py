"""Every table of the built site fits its page at a 1280 px window, or scrolls inside its own box.

A headless Chromium (driven by Playwright) opens every page of the HTML site at 1280 × 800 and
measures each table in the page's article: the table's box, or that of the nearest scroll box
around it (the table itself or a wrapper up to the article with ``overflow-x: auto`` or
``scroll``), must end at or before the article's right edge. A table that is wider than the
column is therefore fine only where it scrolls in a box of its own (``docs/_static/tables.css``);
one that pushes the page wider, or is cut off by the page, fails with its page and width.

The site is the one ``SKETCHCORE_DOCS_HTML`` names (``.ci/run`` builds ``docs/_build/html`` and
passes it), or, with ``SKETCHCORE_DOCS_HTML=build``, one built here into a temporary folder. Without
the variable the test is skipped, so that the README's test command does not build the site a
second time. Chromium is ``$SKETCHCORE_CHROMIUM``, else ``chromium`` on PATH (Debian:
``apt-get install chromium``); Playwright's own browser download is not needed.
"""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
VIEWPORT = {"width": 1280, "height": 800}
SKIPPED_FOLDERS = {"_static", "_sources", "_modules", "_images"}

# For each table of the article: its width, the right edge of what shows it (the table, or the
# nearest scroll box between it and the article) and the article's right edge.
MEASURE_TABLES = """
() => {
  const article = document.querySelector("article[role=main]") || document.querySelector("article")
                  || document.body;
  const limit = article.getBoundingClientRect().right;
  const found = [];
  for (const table of article.querySelectorAll("table")) {
    let box = null;
    for (let node = table; node && node !== article; node = node.parentElement) {
      const overflow = getComputedStyle(node).overflowX;
      if (overflow === "auto" || overflow === "scroll") { box = node; break; }
    }
    const shown = box || table;
    const scrolls = box !== null && box.scrollWidth > box.clientWidth;
    const header = table.querySelector("th, td");
    found.push({
      label: (header ? header.textContent : "").trim().slice(0, 60),
      width: table.scrollWidth,
      right: shown.getBoundingClientRect().right,
      limit: limit,
      in_scroll_box: box !== null,
      scrolls: scrolls,
    });
  }
  return found;
}
"""


def overflowing(tables: list[dict]) -> list[str]:
    """The tables of one page that reach past the article's right edge, as text."""
    return [f"table '{t['label']}' ({t['width']} px) ends at {t['right']:.0f} px, past the article's "
            f"right edge at {t['limit']:.0f} px" + (" (its scroll box does too)" if t["in_scroll_box"] else "")
            for t in tables if t["right"] > t["limit"] + 1]


def _chromium() -> str:
    path = os.environ.get("SKETCHCORE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path or not os.path.exists(path):
        pytest.skip("no Chromium: install it (Debian: apt-get install chromium) or set SKETCHCORE_CHROMIUM")
    return path


def _built_site(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    where = os.environ.get("SKETCHCORE_DOCS_HTML")
    if not where:
        pytest.skip("SKETCHCORE_DOCS_HTML is not set: set it to a built site (.ci/run: docs/_build/html) "
                    "or to 'build' to build one here")
    if where != "build":
        site = pathlib.Path(where).resolve()
        assert (site / "index.html").is_file(), f"SKETCHCORE_DOCS_HTML={where}: no index.html there"
        return site
    for module in ("sphinx", "furo", "breathe", "myst_parser"):
        pytest.importorskip(module, reason=f"building the docs needs {module} (pip install '.[docs]')")
    if shutil.which("doxygen") is None:
        pytest.skip("building the docs needs doxygen on PATH (Debian: apt-get install doxygen)")
    site = tmp_path_factory.mktemp("docs_html")
    subprocess.run([sys.executable, "-m", "sphinx", "-q", "-b", "html", str(ROOT / "docs"), str(site)],
                   check=True, cwd=ROOT)
    return site


@pytest.fixture(scope="module")
def browser_page(tmp_path_factory):
    site = _built_site(tmp_path_factory)
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs Playwright (pip install playwright==1.65.2)")
    executable = _chromium()
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            yield site, browser.new_page(viewport=VIEWPORT)
        finally:
            browser.close()


def test_the_check_sees_a_table_that_overflows_and_spares_one_that_scrolls(browser_page):
    _, page = browser_page
    cells = "".join(f"<td>column{i}_with_a_long_unbreakable_value</td>" for i in range(40))
    page.set_content(f"""<article role="main" style="width: 800px">
        <table id="wide"><tr>{cells}</tr></table>
        <div style="overflow-x: auto"><table><tr>{cells}</tr></table></div></article>""")
    measured = page.evaluate(MEASURE_TABLES)
    assert [t["in_scroll_box"] for t in measured] == [False, True]
    assert measured[1]["scrolls"] and measured[0]["width"] > 1280
    problems = overflowing(measured)
    assert len(problems) == 1 and "column0" in problems[0]


def test_every_table_fits_or_scrolls_in_its_own_box_at_1280_px(browser_page):
    site, page = browser_page
    pages = sorted(p for p in site.rglob("*.html") if not SKIPPED_FOLDERS & set(p.relative_to(site).parts))
    assert len(pages) > 10, f"{site}: only {len(pages)} pages"
    problems, tables = [], 0
    for path in pages:
        page.goto(path.as_uri())
        measured = page.evaluate(MEASURE_TABLES)
        tables += len(measured)
        problems += [f"{path.relative_to(site)}: {problem}" for problem in overflowing(measured)]
    assert tables > 20, f"only {tables} tables found in {len(pages)} pages: is the article selector stale?"
    assert not problems, "tables that do not fit at 1280 px:\n  " + "\n  ".join(problems)
