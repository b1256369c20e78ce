"""Where the CUDA backend's cuBLASLt comes from (sketchcore._cublaslt): the search order over
$SKETCHCORE_CUBLASLT, NVIDIA's pip package and the CUDA toolkit, the error that names the package
to install, and what `python -m sketchcore info` reports. No GPU is needed: a copy of a real shared
library stands in for cuBLASLt (dlopen only maps it), in fake directories laid out like the pip
package (nvidia/cu13/lib) and the toolkit (lib64). Loading runs in a subprocess, so that no fake
library stays in this process."""
import json
import os
import shutil
import subprocess
import sys

import pytest

import sketchcore
from sketchcore import _cublaslt


def _stand_in() -> str:
    """A shared library that any process can dlopen without side effects."""
    import _ctypes
    path = getattr(_ctypes, "__file__", None)
    if path and path.endswith(".so"):
        return path
    import scipy_openblas32
    return os.path.join(scipy_openblas32.get_lib_dir(), scipy_openblas32.get_library(fullname=True))


def _fake(directory, major=13, loadable=True):
    """A stand-in libcublasLt.so.<major> in `directory`; returns its path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(str(directory), f"libcublasLt.so.{major}")
    if loadable:
        shutil.copy(_stand_in(), path)
    else:
        with open(path, "wb") as f:
            f.write(b"not an ELF file")
    return path


def _pip_site(root, major=13, loadable=True):
    """A site-packages folder holding NVIDIA's pip package layout for `major`."""
    lib = ("nvidia", f"cu{major}", "lib") if major >= 13 else ("nvidia", "cublas", "lib")
    return str(root), _fake(os.path.join(str(root), *lib), major, loadable)


def _locate_in_subprocess(major, environ, sys_path):
    """Runs _cublaslt.locate(system=False) in a fresh interpreter: (Found as a dict, or the error)."""
    code = ("import json, sys; from sketchcore import _cublaslt\n"
            "major, environ, path = json.loads(sys.argv[1])\n"
            "try:\n"
            "    found = _cublaslt.locate(major, environ=environ, sys_path=path, system=False)\n"
            "    print(json.dumps({'path': found.path, 'found_by': found.found_by}))\n"
            "except RuntimeError as error:\n"
            "    print(json.dumps({'error': str(error)}))\n")
    done = subprocess.run([sys.executable, "-c", code, json.dumps([major, environ, sys_path])],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_candidates_are_pip_package_then_loader_then_toolkit(tmp_path):
    site, library = _pip_site(tmp_path / "site")
    environ = {"CUDA_HOME": "/opt/cuda-home", "CUDA_PATH": "/opt/cuda-path"}
    found = _cublaslt.candidates(13, environ=environ, sys_path=[str(tmp_path / "empty"), site, site])
    assert found == [
        (library, "pip package nvidia-cublas"),
        ("libcublasLt.so.13", "dynamic loader (LD_LIBRARY_PATH, ldconfig)"),
        ("/opt/cuda-home/lib64/libcublasLt.so.13", "CUDA toolkit ($CUDA_HOME)"),
        ("/opt/cuda-path/lib64/libcublasLt.so.13", "CUDA toolkit ($CUDA_PATH)"),
        ("/usr/local/cuda/lib64/libcublasLt.so.13", "CUDA toolkit (/usr/local/cuda)"),
    ]


def test_cuda_12_looks_in_the_cu12_package_layout_only(tmp_path):
    site12, library12 = _pip_site(tmp_path / "site12", major=12)
    site13, _ = _pip_site(tmp_path / "site13", major=13)
    found = _cublaslt.candidates(12, environ={}, sys_path=[site13, site12], system=False)
    assert found == [(library12, "pip package nvidia-cublas-cu12")]
    assert _cublaslt.candidates(13, environ={}, sys_path=[site12], system=False) == []


@pytest.mark.parametrize(("major", "install"), [(13, 'pip install "nvidia-cublas>=13,<14"'),
                                                (12, 'pip install "nvidia-cublas-cu12"')])
def test_nothing_found_names_the_package_to_install(tmp_path, major, install):
    found = _locate_in_subprocess(major, {}, [str(tmp_path)])
    assert install in found["error"], found
    assert f"libcublasLt.so.{major}" in found["error"] and "SKETCHCORE_CUBLASLT" in found["error"], found


def test_pip_package_is_found_and_loaded(tmp_path):
    site, library = _pip_site(tmp_path / "site")
    found = _locate_in_subprocess(13, {"CUDA_HOME": str(tmp_path / "toolkit")}, [site])
    assert found == {"path": library, "found_by": "pip package nvidia-cublas"}


def test_unloadable_file_is_skipped_and_named_in_the_error(tmp_path):
    site, library = _pip_site(tmp_path / "site", loadable=False)
    found = _locate_in_subprocess(13, {}, [site])
    assert library in found["error"] and "pip install" in found["error"], found


def test_toolkit_is_used_without_the_pip_package(tmp_path):
    library = _fake(tmp_path / "toolkit" / "lib64")
    found = _locate_in_subprocess(13, {"CUDA_HOME": str(tmp_path / "toolkit")}, [str(tmp_path)])
    assert found == {"path": library, "found_by": "CUDA toolkit ($CUDA_HOME)"}


@pytest.mark.parametrize("form", ["file", "directory"])
def test_environment_variable_wins_over_the_pip_package(tmp_path, form):
    site, _ = _pip_site(tmp_path / "site")
    chosen = _fake(tmp_path / "chosen")
    value = chosen if form == "file" else os.path.dirname(chosen)
    found = _locate_in_subprocess(13, {"SKETCHCORE_CUBLASLT": value}, [site])
    assert found == {"path": chosen, "found_by": "$SKETCHCORE_CUBLASLT"}


def test_environment_variable_naming_nothing_is_an_error_not_a_fallback(tmp_path):
    site, _ = _pip_site(tmp_path / "site")
    missing = str(tmp_path / "missing" / "libcublasLt.so.13")
    found = _locate_in_subprocess(13, {"SKETCHCORE_CUBLASLT": missing}, [site])
    assert found["error"].startswith("sketchcore: SKETCHCORE_CUBLASLT: expected cuBLASLt (libcublasLt.so.13)"), found
    assert missing in found["error"], found


def _info(environ):
    done = subprocess.run([sys.executable, "-m", "sketchcore", "info", "--json"], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **environ})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["cublaslt"]


@pytest.mark.skipif(sketchcore.build_info()["cuda"], reason="a CPU-only build's report")
def test_info_says_a_cpu_build_uses_no_cublaslt():
    assert _info({}) == {"status": "not built (this build has no CUDA backend)"}  # not an error (issue 61)


@pytest.mark.skipif(not sketchcore.build_info()["cuda"], reason="needs a build with the CUDA backend")
def test_info_reports_the_library_loaded_and_how_it_was_found(tmp_path):
    chosen = _fake(tmp_path / "chosen", major=sketchcore.build_info()["cuda_runtime_version"] // 1000)
    assert _info({"SKETCHCORE_CUBLASLT": chosen}) == {"path": chosen, "found_by": "$SKETCHCORE_CUBLASLT"}
    missing = str(tmp_path / "missing.so")
    assert _info({"SKETCHCORE_CUBLASLT": missing})["error"].startswith("sketchcore: SKETCHCORE_CUBLASLT: "), missing


def _preload_in_subprocess(devices):
    """_cuda.preload_cublaslt() as a CUDA 13 build with `devices` devices and nothing to find sees it."""
    code = ("from sketchcore import _cublaslt, _cuda\n"
            f"_cuda.cuda_major = lambda: 13\n_cuda._device_count = lambda: {devices}\n"
            "_cublaslt.candidates = lambda *args, **kwargs: []\n"
            "try:\n    _cuda.preload_cublaslt()\n    print('no error')\n"
            "except RuntimeError as error:\n    print(error)\n")
    environ = {k: v for k, v in os.environ.items() if k != "SKETCHCORE_CUBLASLT"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=environ)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_cuda_call_without_cublaslt_raises_naming_the_package():
    message = _preload_in_subprocess(devices=1)
    assert message.startswith("sketchcore: the CUDA backend (CUDA 13) needs cuBLASLt"), message
    assert 'pip install "nvidia-cublas>=13,<14"' in message, message


def test_without_a_device_the_search_is_left_to_the_cores_device_error():
    assert _preload_in_subprocess(devices=0) == "no error"
