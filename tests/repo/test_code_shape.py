"""The Python package stays readable: no import circle, no file over 450 lines, and no function over
60 lines of body in ``torch/`` and ``tuner/`` (the layers a newcomer reads first).

Imports are read from the source (``ast``), not by importing: every ``import``/``from … import``
of a ``sketchcore`` module anywhere in a file (inside functions and under ``if TYPE_CHECKING:`` too:
a deferred import, or one for annotations only, is still a dependency of the design). ``from package import name`` depends on the module
that defines ``name`` when the package's ``__init__`` only hands names on.
"""
from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "python" / "sketchcore"
MAX_FILE_LINES = 450
MAX_FUNCTION_BODY = 60
FUNCTION_LIMITED = ("torch", "tuner")


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, pathlib.Path]:
    return {module_name(path): path for path in PACKAGE.rglob("*.py")}


def _compiled_modules() -> set[str]:
    """The Cython extension modules: imported by name like any module; their own imports are C-level."""
    return {module_name(path) for path in PACKAGE.rglob("*.pyx")}


def _import_nodes(tree: ast.AST):
    return (node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom)))


def _package_exports(path: pathlib.Path, name: str) -> dict[str, str]:
    """For a package ``__init__``: which module each re-exported name comes from."""
    exports: dict[str, str] = {}
    for node in _import_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            source = _absolute(node, name, is_package=True)
            for alias in node.names:
                exports[alias.asname or alias.name] = source
    return exports


def _absolute(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules) | _compiled_modules()
    exports = {name: _package_exports(path, name) for name, path in modules.items() if path.name == "__init__.py"}

    def resolve(target: str, imported: str | None) -> str | None:
        if imported and f"{target}.{imported}" in known:
            return f"{target}.{imported}"
        if imported and target in exports and imported in exports[target]:
            return resolve(exports[target][imported], None) or exports[target][imported]
        return target if target in known else None

    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in _import_nodes(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [resolve(alias.name, None) for alias in node.names]
            else:
                source = _absolute(node, name, path.name == "__init__.py")
                targets = [resolve(source, alias.name) for alias in node.names]
            graph[name].update(t for t in targets if t and t != name and t.startswith("sketchcore"))
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circle_in_the_package():
    assert circles(import_graph()) == []


def test_the_circle_finder_finds_a_circle_and_ignores_a_chain():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_python_file_over_450_lines():
    sources = [p for p in PACKAGE.rglob("*") if p.suffix in (".py", ".pyx", ".pyi", ".pxd")]
    long = {str(p.relative_to(ROOT)): n for p in sources if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_FILE_LINES}
    assert not long, f"files over {MAX_FILE_LINES} lines: {long}"


def function_body_lengths(path: pathlib.Path, root: pathlib.Path = ROOT) -> dict[str, int]:
    """Lines of body (from the first statement after the docstring to the last line) per function."""
    lengths: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                body = body[1:]
            lengths[f"{path.relative_to(root)}:{node.lineno}:{node.name}"] = body[-1].end_lineno - body[0].lineno + 1
    return lengths


def test_no_function_over_60_lines_of_body_in_torch_and_tuner():
    long = {}
    for folder in FUNCTION_LIMITED:
        for path in (PACKAGE / folder).rglob("*.py"):
            long.update({k: v for k, v in function_body_lengths(path).items() if v > MAX_FUNCTION_BODY})
    assert not long, f"functions over {MAX_FUNCTION_BODY} lines of body: {long}"


def test_the_body_count_skips_the_docstring_and_counts_nested_lines(tmp_path):
    source = tmp_path / "m.py"
    source.write_text('def f():\n    """Doc\n    string."""\n    a = 1\n    if a:\n        a += 1\n    return a\n')
    assert function_body_lengths(source, tmp_path) == {"m.py:1:f": 4}
