# cython: language_level=3
"""Bindings of the core's runtime settings and facts: thread count, build information, the
activation names, the CUDA device count and the gated paths (the operations themselves:
sketchcore._ops)."""
from libcpp cimport bool as cbool
from libcpp.optional cimport optional

from sketchcore cimport _sketchcore as core


def set_num_threads(num_threads):
    """Sets how many CPU threads sketchcore's own loops and its own BLAS may use.

    GEMMs that run in NumPy's or torch's BLAS (see :func:`set_cpu_blas`) follow that
    framework's thread setting.

    Parameters
    ----------
    num_threads : int
        At least 1, at most 2**31 - 1.

    Returns
    -------
    None

    Raises
    ------
    TypeError
        ``num_threads`` is not an int (a bool is refused).
    ValueError
        ``num_threads`` is below 1 or above 2**31 - 1.

    Examples
    --------
    >>> before = get_num_threads()
    >>> set_num_threads(1); get_num_threads()
    1
    >>> set_num_threads(before)
    >>> set_num_threads(0)
    Traceback (most recent call last):
    ValueError: set_num_threads: num_threads: expected an integer ≥ 1, got 0
    """
    if isinstance(num_threads, bool) or not hasattr(num_threads, "__index__"):
        raise TypeError(f"set_num_threads: num_threads: expected an int, got {type(num_threads).__name__}")
    num_threads = num_threads.__index__()
    if num_threads < 1:
        raise ValueError(f"set_num_threads: num_threads: expected an integer ≥ 1, got {num_threads}")
    if num_threads > 2**31 - 1:
        raise ValueError(f"set_num_threads: num_threads: expected an integer ≤ 2**31 - 1, got {num_threads}")
    core.set_num_threads(num_threads)


def get_num_threads():
    """Returns the CPU thread count sketchcore uses (see :func:`set_num_threads`).

    Returns
    -------
    int
        At least 1.

    Raises
    ------
    Nothing.

    Examples
    --------
    >>> get_num_threads() >= 1
    True
    """
    return core.get_num_threads()


def build_info():
    """Describes how the native library was built: version, BLAS, CUDA.

    Returns
    -------
    dict
        ``version`` (str), ``blas`` (str), ``cuda`` (bool: the CUDA backend is compiled in),
        ``cuda_runtime_version`` (int, 0 without CUDA), ``cpu_bf16_gemm`` (bool: this CPU
        multiplies bfloat16 operands in a native bfloat16 GEMM, AVX512_BF16, instead of widening
        them to float32: the same results up to summation order, but subnormal inputs, products and
        sums flushed to zero; ``SKETCHCORE_BF16_GEMM=0`` in the environment turns it off),
        ``cpu_bf16_amx`` (bool: that GEMM runs on AMX-BF16 tiles, Intel Sapphire Rapids on, where
        the operating system grants the tile state; ``SKETCHCORE_BF16_AMX=0`` keeps the AVX512_BF16
        kernel; the same results up to summation order) and
        ``cpu_activation_kernels`` (str: which kernels run the float32 GELU, GELU-tanh and SiLU
        epilogues, ``"avx512"``, ``"avx2"`` or ``"portable"``, the best this CPU has; all within
        4 ulp of float64; ``SKETCHCORE_CPU_ACTIVATIONS=avx2`` or ``=portable`` caps the choice).

    Raises
    ------
    Nothing.

    Examples
    --------
    >>> sorted(build_info())
    ['blas', 'cpu_activation_kernels', 'cpu_bf16_amx', 'cpu_bf16_gemm', 'cuda', 'cuda_runtime_version', 'version']
    """
    info = core.build_info()
    return {
        "version": info.version.decode(),
        "blas": info.blas.decode(),
        "cuda": bool(info.cuda),
        "cuda_runtime_version": info.cuda_runtime_version,
        "cpu_bf16_gemm": bool(info.cpu_bf16_gemm),
        "cpu_bf16_amx": bool(info.cpu_bf16_amx),
        "cpu_activation_kernels": info.cpu_activation_kernels.decode(),
    }


def activation_names():
    """The activation names the core accepts, in its order (``sketchcore.ACTIVATIONS``).

    Returns
    -------
    tuple of str

    Raises
    ------
    Nothing.

    Examples
    --------
    >>> activation_names()
    ('none', 'relu', 'gelu', 'gelu_tanh', 'silu')
    """
    return tuple(core.activation_name(a).decode() for a in core.all_activations())


def cuda_device_count():
    """Number of CUDA devices sketchcore can use.

    Returns
    -------
    int
        0 without the CUDA backend, a driver or a device.

    Raises
    ------
    Nothing.

    Examples
    --------
    >>> cuda_device_count() >= 0
    True
    """
    return core.cuda_device_count()


# Gated (device-unverified) paths: the core's registry (gated_paths.hpp). The documented API is
# sketchcore._gates; these take and return plain values.
_DTYPES = {"float16": core.DType.float16, "bfloat16": core.DType.bfloat16, "float32": core.DType.float32,
           "float64": core.DType.float64}


cdef core.GatedPath _path(name) except *:
    if not isinstance(name, str):
        raise TypeError(f"gated path: name: expected a str, got {type(name).__name__}")
    return core.gated_path_from_name(name.encode())


def _gated_paths():
    """[(name, description, enabled, overridden)] of every gated path, in the core's order."""
    return [(p.name.decode(), p.description.decode(), bool(p.enabled), bool(p.overridden))
            for p in core.gated_paths()]


def _gated_path_enabled(name):
    return bool(core.gated_path_enabled(_path(name)))


def _set_gated_path(name, enabled):
    """enabled: True, False or None (back to the environment's setting)."""
    cdef core.GatedPath path = _path(name)
    cdef optional[cbool] value
    if enabled is not None:
        value = <cbool>enabled
    core.set_gated_path_enabled(path, value)


def _gated_path_override(name):
    cdef optional[cbool] value = core.gated_path_override(_path(name))
    return bool(value.value()) if value.has_value() else None


def _require_gated_path(name, operation):
    core.require_gated_path(_path(name), str(operation).encode())


def _cuda_inner_width(rank, dtype):
    return core.cuda_inner_width(rank, _DTYPES[dtype])
