"""Runs the ``Examples`` of the public API's docstrings (doctest), so that the reference's
examples stay true. One test per module; modules that need an optional framework that is not
installed (torch, JAX) are skipped, naming it."""
from __future__ import annotations

import doctest
import importlib
import importlib.util

import pytest

MODULES = [
    "sketchcore",
    "sketchcore._cpu_blas",
    "sketchcore._cuda",
    "sketchcore._ops",
    "sketchcore._int8",
    "sketchcore._quantized",
    "sketchcore._performer",
    "sketchcore._runtime",
    "sketchcore._framework_gemm",
    "sketchcore._gates",
    "sketchcore._dlpack",
    "sketchcore._dlpack_buffer",
    "sketchcore.sketch",
    "sketchcore.memory",
    "sketchcore.layers",
    "sketchcore.linalg",
    "sketchcore.linalg._cqrrpt",
    "sketchcore.linalg._randomized_svd",
    "sketchcore.linalg._rsvd",
    "sketchcore.cli",
    "sketchcore.torch",
    "sketchcore.torch.layers._attention",
    "sketchcore.torch.layers._conv",
    "sketchcore.torch.compress._convert",
    "sketchcore.torch.compress._restore",
    "sketchcore.torch.compress._allocate",
    "sketchcore.torch.compress._calibration",
    "sketchcore.torch.ops._functional",
    "sketchcore.torch.layers._lowrank",
    "sketchcore.torch.layers._sklinear",
    "sketchcore.torch.ops._performer",
    "sketchcore.torch.ops._memory_mode",
    "sketchcore.torch.compress._report",
    "sketchcore.torch.compress._registry",
    "sketchcore.torch.layers._derived_weight",
    "sketchcore.torch.layers._layer_state",
    "sketchcore.torch.parallel",
    "sketchcore.torch.parallel._styles",
    "sketchcore.torch.parallel._comm",
    "sketchcore.torch.layers._int8",
    "sketchcore.torch.layers._int8_linear",
    "sketchcore.torch.layers._quantized",
    "sketchcore.torch.compress._quantize",
    "sketchcore.torch.deploy._onnx",
    "sketchcore.jax",
    "sketchcore.tuner",
    "sketchcore.tuner._configs",
    "sketchcore.tuner._params",
    "sketchcore.tuner._search",
    "sketchcore.tuner._spectral",
    "sketchcore.tuner._tuner",
    "sketchcore.tuner._results",
    "sketchcore.tuner._optuna",
    "sketchcore.tuner._resolvers",
    "sketchcore.tuner._results_file",
    "sketchcore.tuner._visualizer",
    "sketchcore.tuner._candidates",
    "sketchcore.tuner.SkAutoTuner",
]
# Classes defined in a private module but shown under a public one (their __module__ names the
# public one): the finder skips their methods in both modules, so they are searched directly,
# with the public module's names as globals.
REHOMED = {"sketchcore.sketch": ("sketchcore._sketch_operator", ("SketchOperator",))}
OPTIONAL = {"sketchcore.torch.deploy": "onnxscript", "sketchcore.torch": "torch", "sketchcore.jax": "jax", "sketchcore.tuner._optuna": "optuna",
            "sketchcore.tuner": "torch"}


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    needs = next((module for prefix, module in OPTIONAL.items() if name.startswith(prefix)), None)
    if needs is not None and importlib.util.find_spec(needs) is None:
        pytest.skip(f"{name} needs {needs}, which is not installed")
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as error:  # a missing optional framework: anything else fails
        if error.name and error.name.split(".")[0] in ("torch", "jax", "jaxlib"):
            pytest.skip(f"{name} needs {error.name}")
        raise
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    tests = [t for t in finder.find(module, name) if t.examples]
    home, classes = REHOMED.get(name, (None, ()))
    for cls in classes:
        found = finder.find(getattr(importlib.import_module(home), cls), f"{name}.{cls}", module=False,
                            globs=vars(module).copy())
        tests += [t for t in found if t.examples]
    for test in tests:
        runner.run(test)
    results = runner.summarize(verbose=False)
    assert results.failed == 0, f"{results.failed} of {results.attempted} docstring examples of {name} failed"


def test_the_finder_sees_the_examples() -> None:
    """The test above checks what it finds: the modules whose docstrings have examples are found."""
    import sketchcore.memory
    import sketchcore.sketch

    finder = doctest.DocTestFinder(exclude_empty=True)
    for module in (sketchcore.sketch, sketchcore.memory):
        assert sum(len(t.examples) for t in finder.find(module, module.__name__)) >= 10
    # SketchOperator's methods (apply, block, to_dense) are found through REHOMED.
    methods = finder.find(sketchcore.sketch.SketchOperator, "SketchOperator", module=False)
    assert {t.name.split(".")[-1] for t in methods if t.examples} >= {"apply", "block", "to_dense"}
    # The packages re-export from private submodules, and the finder only looks at objects whose
    # __module__ is the module scanned: the examples are found through the submodules.
    for name in ("sketchcore.linalg._cqrrpt", "sketchcore.linalg._randomized_svd", "sketchcore.linalg._rsvd"):
        module = importlib.import_module(name)
        assert sum(len(t.examples) for t in finder.find(module, name)) >= 5, name
