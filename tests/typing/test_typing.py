"""Type-checks the sample user scripts in tests/typing/ against the installed package with
`mypy --strict` and pyright (strict mode, set in each script): a public function that loses
its annotations, or returns `Any` where the type is known, fails here."""
import pathlib
import shutil
import subprocess
import sys

import pytest

SCRIPTS = pathlib.Path(__file__).parent


def _scripts():
    scripts = [SCRIPTS / "user_code.py"]
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        scripts.append(SCRIPTS / "torch_user_code.py")
    return [str(s) for s in scripts]


def _run(command, tmp_path):
    result = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert result.returncode == 0, f"{' '.join(command)}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_user_scripts_pass_mypy_strict(tmp_path):
    pytest.importorskip("mypy", reason="mypy is in the test extras: pip install '.[test]'")
    out = _run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"), *_scripts()],
               tmp_path)
    assert "Success: no issues found" in out


def test_user_scripts_pass_pyright_strict(tmp_path):
    pytest.importorskip("pyright", reason="pyright is in the test extras: pip install '.[test]'")
    if shutil.which("node") is None:
        pytest.skip("pyright needs Node.js on PATH (the PyPI wrapper would download one)")
    out = _run([sys.executable, "-m", "pyright", "--pythonpath", sys.executable, *_scripts()], tmp_path)
    assert "0 errors" in out


def test_a_wrong_annotation_is_caught(tmp_path):
    """The check has teeth: a script that misuses a typed result fails mypy."""
    pytest.importorskip("mypy", reason="mypy is in the test extras: pip install '.[test]'")
    bad = tmp_path / "bad.py"
    bad.write_text("import sketchcore\nn: str = sketchcore.memory.stats()['current_bytes']\n"
                   "k: str = sketchcore.sketch.jl_min_dim(10)\n")
    result = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"),
                             str(bad)], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert result.returncode == 1
    assert result.stdout.count("Incompatible types in assignment") == 2, result.stdout
