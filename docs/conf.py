"""Sphinx configuration of sketchcore's documentation.

Build (from the repository root, with sketchcore installed):

    pip install ".[docs]" && python -m sphinx -W -b html docs docs/_build/html

Pages are MyST Markdown; the Python reference comes from the docstrings (NumPy style, read
by napoleon) and signatures of the installed package; the C++ reference from the Doxygen
comments of ``src/cpp/include/sketchcore/`` (Doxygen XML read by Breathe; the C ABI's
``sketchcore.h`` too). Doxygen must be on PATH (Debian: ``apt-get install doxygen``).
"""
from __future__ import annotations

import ast
import importlib
import os
import shutil
import subprocess
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

project = "sketchcore"
author = "The sketchcore developers"
copyright = "2026, The sketchcore developers"

import sketchcore  # noqa: E402 - the installed package is what is documented

release = sketchcore.__version__
version = release

sys.path.insert(0, os.path.join(HERE, "_ext"))
extensions = [
    "mathml_render",  # formulas as MathML: the pages render them offline (no MathJax CDN)
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "breathe",
]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
myst_enable_extensions = ["colon_fence", "deflist", "dollarmath"]
myst_heading_anchors = 3
html_math_renderer = "mathml"

html_theme = "furo"
html_title = f"sketchcore {release}"
# Wide tables scroll in their own box at any window width (tests/docs/test_docs_tables.py checks it).
html_static_path = ["_static"]
html_css_files = ["tables.css"]

# --- Python API (autodoc + napoleon) -------------------------------------------------------
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
autodoc_typehints = "signature"
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": False}
# Some annotations name types only imported under TYPE_CHECKING (numpy.typing, torch): they
# are shown as written rather than resolved.
autodoc_type_aliases: dict[str, str] = {}


def _import_jax_module() -> None:
    """Makes ``sketchcore.jax`` importable for autodoc on a machine without JAX or without
    the package's JAX handlers (a build made while JAX was not importable).

    The real module is used when it imports. Otherwise ``jax`` is replaced by Sphinx's mock
    and the module's source is executed without its top-level calls (the FFI registration,
    which needs the compiled handlers): its functions and docstrings are what they are in
    the real module, only never called here.
    """
    try:
        importlib.import_module("sketchcore.jax")
        return
    except ImportError:
        pass
    from sphinx.ext.autodoc.mock import MockFinder

    finder = MockFinder(["jax"])
    sys.meta_path.insert(0, finder)
    path = os.path.join(os.path.dirname(sketchcore.__file__), "jax.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    tree.body = [node for node in tree.body
                 if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call))]
    module = types.ModuleType("sketchcore.jax")
    module.__file__ = path
    module.__package__ = "sketchcore"
    sys.modules["sketchcore.jax"] = module
    exec(compile(tree, path, "exec"), module.__dict__)  # noqa: S102 - the package's own source
    sketchcore.jax = module  # type: ignore[attr-defined]


_import_jax_module()

try:  # the sketchcore.torch reference is generated from the real modules
    import torch  # noqa: F401
except ImportError as error:
    raise RuntimeError("docs: the sketchcore.torch reference needs PyTorch; install it (for the CPU build: "
                       "pip install torch==2.13.0) and build again") from error

# --- C++ API (Doxygen XML + Breathe) -------------------------------------------------------
DOXYGEN_XML = os.path.join(HERE, "_build", "doxygen", "xml")
breathe_projects = {"sketchcore": DOXYGEN_XML}
breathe_default_project = "sketchcore"
breathe_domain_by_extension = {"hpp": "cpp"}
breathe_default_members = ("members",)

_DOXYFILE = f"""
PROJECT_NAME           = sketchcore
INPUT                  = {os.path.join(ROOT, "src", "cpp", "include", "sketchcore")}
FILE_PATTERNS          = *.hpp *.h
RECURSIVE              = NO
OUTPUT_DIRECTORY       = {os.path.dirname(DOXYGEN_XML)}
GENERATE_XML           = YES
GENERATE_HTML          = NO
GENERATE_LATEX         = NO
XML_PROGRAMLISTING     = NO
EXTRACT_ALL            = NO
JAVADOC_AUTOBRIEF      = YES
MARKDOWN_SUPPORT       = YES
ENABLE_PREPROCESSING   = YES
MACRO_EXPANSION        = YES
EXPAND_ONLY_PREDEF     = YES
PREDEFINED             = SKETCHCORE_API= SKETCHCORE_C_API=
TYPEDEF_HIDES_STRUCT   = YES
QUIET                  = YES
WARN_IF_UNDOCUMENTED   = NO
"""


def _run_doxygen() -> None:
    """Writes the Doxygen XML of the public C++ headers that Breathe reads."""
    doxygen = shutil.which("doxygen")
    if doxygen is None:
        raise RuntimeError("docs: doxygen is needed for the C++ reference and was not found on PATH; "
                           "install it (Debian/Ubuntu: apt-get install doxygen) and build again")
    os.makedirs(DOXYGEN_XML, exist_ok=True)
    subprocess.run([doxygen, "-"], input=_DOXYFILE, text=True, check=True, cwd=ROOT)


_run_doxygen()


def _skip_int8_factor_shape(app, what, name, obj, skip, options):  # noqa: ARG001 (Sphinx's signature)
    """Leaves Int8Factor.shape and Fp8Factor.shape out of the reference (the class texts describe
    them): a second indexed ``shape`` beside SketchOperator.shape makes every docstring's "array, shape (...)"
    type an ambiguous cross-reference, which the -W build refuses."""
    owner = getattr(obj, "__objclass__", None)
    if what == "class" and name == "shape" and getattr(owner, "__name__", "") in ("Int8Factor", "Fp8Factor"):
        return True
    return None


def setup(app):
    app.connect("autodoc-skip-member", _skip_int8_factor_shape)
