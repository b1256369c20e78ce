"""What the installed package offers besides the operation: metadata, build info, and a
CMake package for C++ users."""
import importlib.metadata
import os
import platform
import sys

import pytest

import sketchcore


def _distribution() -> str:
    """The distribution that installed the package: sketchcore, or a CUDA wheel's sketchcore-cu13."""
    names = importlib.metadata.packages_distributions().get("sketchcore", [])
    return names[0] if len(names) == 1 else "sketchcore"


def test_version_matches_the_distribution():
    assert sketchcore.__version__ == importlib.metadata.version(_distribution())


def test_build_info_describes_the_native_library():
    info = sketchcore.build_info()
    assert set(info) == {"version", "blas", "cuda", "cuda_runtime_version", "cpu_bf16_gemm", "cpu_bf16_amx",
                         "cpu_activation_kernels"}
    assert info["blas"] in {"scipy-openblas32", "OpenBLAS", "Generic"}
    assert isinstance(info["cuda"], bool)
    assert (info["cuda_runtime_version"] > 0) == info["cuda"]
    # the native bfloat16 GEMM exactly where the CPU has AVX512_BF16 (Linux reports the flag)
    if os.path.exists("/proc/cpuinfo") and platform.machine() == "x86_64":
        with open("/proc/cpuinfo") as f:
            flags = f.read()
        assert info["cpu_bf16_gemm"] == ("avx512_bf16" in flags and os.environ.get("SKETCHCORE_BF16_GEMM") != "0")
        # and on AMX tiles where the CPU has AMX-BF16 (Linux lists amx_bf16 only where it supports
        # the tile state, which it grants on request), unless the environment keeps VDPBF16PS
        assert info["cpu_bf16_amx"] == (info["cpu_bf16_gemm"] and " amx_bf16" in flags and " amx_tile" in flags
                                        and os.environ.get("SKETCHCORE_BF16_AMX") != "0")
        # The best intrinsic activation kernels the CPU has (a default build compiles them in),
        # unless the environment caps them.
        best = "avx512" if " avx512f" in flags else "avx2" if " avx2" in flags and " fma" in flags else "portable"
        cap = os.environ.get("SKETCHCORE_CPU_ACTIVATIONS")
        order = ["portable", "avx2", "avx512"]
        expected = order[min(order.index(best), order.index(cap))] if cap in order else best
        assert info["cpu_activation_kernels"] == expected


def test_cmake_package_is_installed_inside_the_python_package():
    prefix = sketchcore.cmake_prefix()
    assert os.path.isfile(os.path.join(prefix, "lib", "cmake", "sketchcore", "sketchcoreConfig.cmake"))
    assert os.path.isfile(os.path.join(prefix, "include", "sketchcore", "sketchcore.hpp"))


def test_thread_count_round_trips():
    before = sketchcore.get_num_threads()
    try:
        sketchcore.set_num_threads(1)
        assert sketchcore.get_num_threads() == 1
    finally:
        sketchcore.set_num_threads(before)
    assert sketchcore.get_num_threads() == before


@pytest.mark.parametrize(("setter", "getter", "argument"),
                         [(sketchcore.set_allow_tf32, sketchcore.get_allow_tf32, "allow"),
                          (sketchcore.set_gemm_tuning, sketchcore.get_gemm_tuning, "tune")])
def test_cuda_switches_are_off_by_default_round_trip_and_take_only_bools(setter, getter, argument):
    assert getter() is False
    try:
        setter(True)
        assert getter() is True
    finally:
        setter(False)
    assert getter() is False
    with pytest.raises(TypeError, match=rf"{setter.__name__}: {argument}: expected a bool, got int"):
        setter(1)
    assert getter() is False


@pytest.mark.parametrize(("value", "expected"), [("1", True), ("0", False), ("", False)])
def test_gemm_tuning_can_be_switched_on_from_the_environment(value, expected):
    import subprocess
    env = {**os.environ, "SKETCHCORE_TUNE_GEMMS": value}
    result = subprocess.run([sys.executable, "-c", "import sketchcore; print(sketchcore.get_gemm_tuning())"],
                            env=env, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == str(expected)


def _package_files():
    files = importlib.metadata.files(_distribution()) or []
    return [str(f) for f in files]


def test_wheel_ships_the_license_and_one_native_library():
    files = _package_files()
    assert any(f.endswith("dist-info/licenses/LICENSE") or f.endswith("dist-info/LICENSE") for f in files), files
    libraries = [f for f in files if os.path.basename(f).startswith("libsketchcore.so")]
    assert libraries == ["sketchcore/lib/libsketchcore.so"], libraries


def test_only_public_files_are_installed():
    files = _package_files()
    private = [f for f in files if f.endswith((".pyx", ".pxd", "_bridge.hpp", "dlpack_abi.h"))]
    assert not private, private


def test_exported_cmake_targets_name_no_build_environment():
    """The BLAS is a private link dependency of the shared library: the installed CMake files
    must not point into the (deleted) pip build environment (no absolute path to a BLAS, no
    BLAS target); the config only looks scipy-openblas32 up at the consumer's configure time."""
    import re
    cmake_dir = os.path.join(sketchcore.cmake_prefix(), "lib", "cmake", "sketchcore")
    for name in os.listdir(cmake_dir):
        with open(os.path.join(cmake_dir, name)) as f:
            text = f.read()
        absolute_paths = re.findall(r'(?:^|[\s"\';(])(/[^\s"\';)]+)', text)
        assert not [p for p in absolute_paths if "openblas" in p.lower()], name
        assert "sketchcore_blas" not in text, name


@pytest.mark.parametrize("layout", ["installed", "apart"])
def test_cpp_program_builds_against_the_pip_installed_package(tmp_path, layout):
    """`installed`: the package as pip laid it out, scipy-openblas32 beside it. `apart`: a copy
    of the package with no scipy-openblas32 beside it (as with pip install --target on the GPU
    machine), where the CMake config finds the BLAS through Python."""
    import shutil
    import subprocess
    cmake = shutil.which("cmake")
    assert cmake, "CMake is a build requirement of sketchcore and must be on PATH"
    examples = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "examples")
    build = tmp_path / "build"
    prefix = sketchcore.cmake_prefix()
    if layout == "apart":
        prefix = str(tmp_path / "sketchcore")
        shutil.copytree(sketchcore.cmake_prefix(), prefix, ignore=shutil.ignore_patterns("__pycache__"))
    configure = [cmake, "-S", examples, "-B", str(build), f"-DCMAKE_PREFIX_PATH={prefix}",
                 f"-DPython3_EXECUTABLE={sys.executable}"]  # the interpreter that has scipy-openblas32
    if shutil.which("ninja"):
        configure += ["-G", "Ninja"]
    for command in (configure, [cmake, "--build", str(build)], [str(build / "sketched_layer")]):
        result = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
    assert result.stdout.rstrip().endswith("OK"), result.stdout
