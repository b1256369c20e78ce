"""What the installed package offers besides the operation: metadata, build info, and a
CMake package for C++ users."""
import importlib.metadata
import os

import sketchcore


def test_version_matches_the_distribution():
    assert sketchcore.__version__ == importlib.metadata.version("sketchcore")


def test_build_info_describes_the_native_library():
    info = sketchcore.build_info()
    assert set(info) == {"version", "blas", "cuda", "cuda_runtime_version"}
    assert info["blas"] in {"scipy-openblas32", "OpenBLAS", "Generic"}
    assert isinstance(info["cuda"], bool)
    assert (info["cuda_runtime_version"] > 0) == info["cuda"]


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
