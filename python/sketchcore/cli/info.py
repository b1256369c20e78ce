"""``sketchcore info``: what a bug report needs — versions, build, devices, threads, frameworks, and
which gated (not yet GPU-verified) paths are enabled."""
from __future__ import annotations

import argparse
import importlib
import json
import os
import platform

import sketchcore
from sketchcore import _cublaslt, _cuda

_FRAMEWORKS = ("numpy", "torch", "cupy", "jax", "scipy_openblas32", "matplotlib")
_ENVIRONMENT = ("SKETCHCORE_NUM_THREADS", "SKETCHCORE_CUDA", "SKETCHCORE_CUBLASLT", "OMP_NUM_THREADS",
                "OPENBLAS_NUM_THREADS", "OMP_WAIT_POLICY", "SKETCHCORE_TUNE_GEMMS", "SKETCHCORE_BF16_GEMM",
                "SKETCHCORE_BF16_AMX", "SKETCHCORE_CPU_ACTIVATIONS", "SKETCHCORE_CUDA_UNVERIFIED")


def cublaslt() -> dict[str, str]:
    """Which cuBLASLt the CUDA backend uses and how it was found (loading it, as a CUDA call
    would), or why there is none."""
    major = _cuda.cuda_major()
    if not major:
        return {"status": "not built (this build has no CUDA backend)"}
    try:
        found = _cublaslt.ensure_loaded(major)
    except RuntimeError as error:
        return {"error": str(error)}
    return {"path": found.path, "found_by": found.found_by}


def gated_paths() -> dict[str, str]:
    """Each gated path (code that has not yet passed its tests on a GPU) and whether calls take
    it: "enabled" or "disabled", with "(set by the program)" for an override; or why the
    environment's setting could not be read."""
    try:
        paths = sketchcore.gated_paths()
    except ValueError as error:
        return {"error": str(error)}
    return {p.name: ("enabled" if p.enabled else "disabled") + (" (set by the program)" if p.overridden else "")
            for p in paths}


def collect() -> dict[str, object]:
    build = sketchcore.build_info()
    frameworks: dict[str, str | None] = {}
    for name in _FRAMEWORKS:
        try:
            frameworks[name] = str(getattr(importlib.import_module(name), "__version__", "installed"))
        except Exception:  # noqa: BLE001 - absent or broken: reported, not fatal
            frameworks[name] = None
    devices: list[str] = [f"cpu ({os.cpu_count()} logical cores, {platform.processor() or platform.machine()})"]
    torch = None
    if frameworks["torch"]:
        import torch
    for index in range(sketchcore.cuda_device_count()):
        name = torch.cuda.get_device_name(index) if torch is not None and torch.cuda.is_available() else "CUDA device"
        devices.append(f"cuda:{index} ({name})")
    cpu_gemms = {"numpy arrays": sketchcore.cpu_blas_of(importlib.import_module("numpy").empty(0))}
    if torch is not None:
        cpu_gemms["torch tensors"] = sketchcore.cpu_blas_of(torch.empty(0))
    return {
        "sketchcore": sketchcore.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "blas": build["blas"],
        "cuda_backend": build["cuda"],
        "cuda_runtime_version": build["cuda_runtime_version"],
        "cublaslt": cublaslt(),
        "cuda_devices": sketchcore.cuda_device_count(),
        "devices": devices,
        "threads": sketchcore.get_num_threads(),
        "cpu_gemms": cpu_gemms,
        "cpu_kernels": {"bf16_gemm": build["cpu_bf16_gemm"], "activations": build["cpu_activation_kernels"]},
        "tf32": sketchcore.get_allow_tf32(),
        "gemm_tuning": sketchcore.get_gemm_tuning(),
        "gated_paths": gated_paths(),
        "frameworks": frameworks,
        "environment": {name: os.environ.get(name) for name in _ENVIRONMENT if os.environ.get(name)},
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m sketchcore info",
                                     description="Print the version, build, devices, threads, frameworks and "
                                                 "the gated CUDA paths (SKETCHCORE_CUDA_UNVERIFIED).")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    args = parser.parse_args(argv)
    facts = collect()
    if args.json:
        print(json.dumps(facts, indent=1))
        return 0
    width = max(len(key) for key in facts)
    for key, value in facts.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k} {v if v is not None else '(not installed)'}" for k, v in value.items()) or "-"
        elif isinstance(value, list):
            value = "; ".join(value)
        print(f"{key:<{width}}  {value}")
    return 0
