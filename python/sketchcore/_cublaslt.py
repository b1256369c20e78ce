"""Finding cuBLASLt for the CUDA backend, which loads it at run time (src/cuda/cublaslt_api.hpp).

A build uses the cuBLASLt of its CUDA major version (``libcublasLt.so.13`` for a CUDA 13 build).
Search order, first hit wins:

1. ``$SKETCHCORE_CUBLASLT``: the library file, or a directory holding it (nothing else is tried);
2. a copy already loaded in this process (torch or CuPy may have loaded one: a second copy
   would waste memory, and the native library's lookup by soname returns the first);
3. NVIDIA's pip package on ``sys.path`` (``nvidia-cublas`` 13.x: ``nvidia/cu13/lib``;
   ``nvidia-cublas-cu12``: ``nvidia/cublas/lib``);
4. the system: the dynamic loader's search (``LD_LIBRARY_PATH``, the ldconfig cache), then
   ``$CUDA_HOME/lib64``, ``$CUDA_PATH/lib64``, ``/usr/local/cuda/lib64``.

The library found is loaded with ``RTLD_GLOBAL``, so that the native library's own lookup by
soname finds this copy. Nothing here imports a framework: it stats files and calls dlopen.
"""
from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

ENV_VAR = "SKETCHCORE_CUBLASLT"


@dataclass(frozen=True)
class Found:
    """The cuBLASLt in use: the file the process mapped, and which step of the search found it."""
    path: str
    found_by: str


def soname(major: int) -> str:
    """``libcublasLt.so.<major>``."""
    return f"libcublasLt.so.{major}"


def pip_package(major: int) -> str:
    """NVIDIA's pip package with cuBLASLt of CUDA ``major``: ``nvidia-cublas-cu12`` for CUDA 12,
    ``nvidia-cublas`` (its 13.x releases) for CUDA 13 (``nvidia-cublas-cu13`` is deprecated)."""
    return "nvidia-cublas" if major >= 13 else f"nvidia-cublas-cu{major}"


def pip_requirement(major: int) -> str:
    """The requirement to install: ``nvidia-cublas>=13,<14`` or ``nvidia-cublas-cu12``."""
    return f"{pip_package(major)}>={major},<{major + 1}" if major >= 13 else pip_package(major)


def _pip_subdir(major: int) -> tuple[str, ...]:
    return ("nvidia", f"cu{major}", "lib") if major >= 13 else ("nvidia", "cublas", "lib")


def candidates(major: int, *, environ: Optional[Mapping[str, str]] = None,
               sys_path: Optional[Sequence[str]] = None, system: bool = True) -> list[tuple[str, str]]:
    """Steps 3 and 4 of the search as ``(file or soname, found_by)`` pairs, in order. Pip
    directories are listed only where the file exists. ``system=False`` leaves out the dynamic
    loader's search and ``/usr/local/cuda`` (for tests)."""
    environ = os.environ if environ is None else environ
    name = soname(major)
    found: list[tuple[str, str]] = []
    for entry in dict.fromkeys(sys.path if sys_path is None else sys_path):
        file = os.path.join(entry or os.curdir, *_pip_subdir(major), name)
        if os.path.isfile(file):
            found.append((file, f"pip package {pip_package(major)}"))
    if system:
        found.append((name, "dynamic loader (LD_LIBRARY_PATH, ldconfig)"))
    roots = [(environ.get(var, ""), f"${var}") for var in ("CUDA_HOME", "CUDA_PATH")]
    if system:
        roots.append(("/usr/local/cuda", "/usr/local/cuda"))
    for root, label in roots:
        if root:
            found.append((os.path.join(root, "lib64", name), f"CUDA toolkit ({label})"))
    return found


class _LinkMap(ctypes.Structure):
    _fields_ = [("l_addr", ctypes.c_size_t), ("l_name", ctypes.c_char_p)]


def _path_of(handle: int) -> Optional[str]:
    """The file behind a dlopen handle (dlinfo RTLD_DI_LINKMAP; in libc since glibc 2.34, in
    libdl before)."""
    for library in (None, "libdl.so.2"):
        try:
            dlinfo = ctypes.CDLL(library).dlinfo
        except (OSError, AttributeError):
            continue
        dlinfo.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
        dlinfo.restype = ctypes.c_int
        link_map = ctypes.POINTER(_LinkMap)()
        if dlinfo(handle, 2, ctypes.byref(link_map)) == 0 and link_map and link_map.contents.l_name:
            return os.fsdecode(link_map.contents.l_name)
    return None


def _load(file: str, flags: int = 0) -> str:
    """dlopens ``file`` globally and returns the path the process mapped."""
    library = ctypes.CDLL(file, mode=ctypes.RTLD_GLOBAL | flags)
    return _path_of(library._handle) or file


def locate(major: int, *, environ: Optional[Mapping[str, str]] = None,
           sys_path: Optional[Sequence[str]] = None, system: bool = True) -> Found:
    """Runs the search (module docstring) and loads what it finds.

    Raises
    ------
    RuntimeError
        ``$SKETCHCORE_CUBLASLT`` does not name a loadable cuBLASLt, or no step found one; the
        message names the pip package to install and what was tried.
    """
    environ = os.environ if environ is None else environ
    name = soname(major)
    override = environ.get(ENV_VAR, "")
    if override:
        file = os.path.join(override, name) if os.path.isdir(override) else override
        try:
            return Found(_load(file), f"${ENV_VAR}")
        except OSError as error:
            raise RuntimeError(f"sketchcore: {ENV_VAR}: expected cuBLASLt ({name}) or a directory holding it, "
                               f"could not load {file} ({error})") from None
    if system:
        try:
            return Found(_load(name, os.RTLD_NOLOAD), "already loaded in this process")
        except OSError:
            pass
    tried: list[str] = []
    last_error = "not found"
    for file, found_by in candidates(major, environ=environ, sys_path=sys_path, system=system):
        try:
            return Found(_load(file), found_by)
        except OSError as error:
            tried.append(file)
            last_error = str(error)
    raise RuntimeError(
        f"sketchcore: the CUDA backend (CUDA {major}) needs cuBLASLt ({name}) and found none: "
        f'pip install "{pip_requirement(major)}", or install the CUDA toolkit\'s cuBLAS, or set {ENV_VAR} '
        f"to the library's path (${ENV_VAR} unset; {pip_package(major)} not on sys.path or not loadable; "
        f"tried {', '.join(tried) or 'nothing else'}; last error: {last_error})")


_found: Optional[Found] = None


def ensure_loaded(major: int) -> Found:
    """``locate(major)`` once per process; a failure is searched again at the next call (the
    user may install the package meanwhile)."""
    global _found
    if _found is None:
        _found = locate(major)
    return _found
