"""sketchcore for JAX: :func:`sketched_matmul` as an XLA custom call, usable under
``jax.jit``, ``jax.grad`` (a ``jax.custom_vjp`` whose backward is sketchcore's fused backward)
and ``jax.vmap``, on the CPU and on CUDA devices.

The calls go through JAX's FFI: handlers written against sketchcore's own declarations of
XLA's FFI C ABI, version 0.1 (``python/sketchcore/jax_ffi.cpp``), built into every sketchcore
install whether JAX was present at build time or not, and accepted by every jaxlib since
0.5. XLA passes its buffers in place; nothing is copied. On a CUDA device the work runs on
XLA's stream for the call (needs a sketchcore built with its CUDA backend). The CUDA handlers
have not yet run on a GPU: they are the gated path ``jax_cuda_handlers``, off unless
``SKETCHCORE_CUDA_UNVERIFIED=1`` (or :func:`sketchcore.set_gated_path`) opens it.

``vmap``: batched calls run once per batch element (``vmap_method="sequential"``): the same
function, and the same dropout masks, as calling each element alone.

Not covered: ``out=`` (JAX arrays are immutable; the eager :func:`sketchcore.sketched_matmul`
refuses it for JAX arrays too), and devices other than the CPU and CUDA GPUs.
"""
from __future__ import annotations

import ctypes
import functools
import os
from typing import Any, Optional

try:
    import jax
    import jax.numpy as jnp
except ImportError as error:  # only JAX itself missing stops this module
    raise ImportError(f"sketchcore.jax needs JAX, which is not installed ({error}): `pip install jax` "
                      "(any version from 0.5), or `pip install sketchcore[jax]`") from error
import numpy as np

import sketchcore  # noqa: F401 - loads libsketchcore, which the handlers link
import sketchcore._ops
from sketchcore import _gates

__all__ = ["sketched_matmul"]

_FORWARD = "sketchcore_sketched_matmul"
_BACKWARD = "sketchcore_sketched_matmul_backward"
_FLOATS = (jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64)
_CUDA_BUILT = bool(sketchcore.build_info()["cuda"])


def _register() -> ctypes.CDLL:
    # Beside the compiled extensions (in an editable install those are not beside this file).
    library = ctypes.CDLL(os.path.join(os.path.dirname(os.path.abspath(sketchcore._ops.__file__)), "_jax_ffi.so"))
    for platform, prefix in (("cpu", "sketchcore_jax_cpu"), ("CUDA", "sketchcore_jax_cuda")):
        jax.ffi.register_ffi_target(_FORWARD, jax.ffi.pycapsule(getattr(library, prefix + "_forward")),
                                    platform=platform)
        jax.ffi.register_ffi_target(_BACKWARD, jax.ffi.pycapsule(getattr(library, prefix + "_backward")),
                                    platform=platform)
    return library


_library = _register()


def _check_device(name: str, a: Any) -> None:
    """Concrete arrays only (a traced value has no device yet; XLA then picks the handler of
    the platform it compiles for): the CPU, or a CUDA GPU where libsketchcore has CUDA."""
    if not isinstance(a, jax.Array) or isinstance(a, jax.core.Tracer):
        return
    _check_platforms(name, {d.platform for d in a.devices()})


def _check_platforms(name: str, platforms: set[str]) -> None:
    """An array on `platforms` is accepted: the CPU, or a CUDA GPU where libsketchcore has CUDA
    and the gated path jax_cuda_handlers is open (the CUDA handlers have not yet run on a GPU; a
    traced call on a GPU meets the same check inside the handler)."""
    if platforms == {"cpu"}:
        return
    if platforms == {"gpu"} and _CUDA_BUILT:
        _gates.require_gated_path("jax_cuda_handlers", f"sketched_matmul: {name}: an array on a CUDA GPU")
        return
    if platforms == {"gpu"}:
        raise ValueError(f"sketched_matmul: {name}: is on a GPU, but this sketchcore was built without its CUDA "
                         "backend (reinstall where nvcc is found, or with SKETCHCORE_CUDA=ON)")
    raise ValueError(f"sketched_matmul: {name}: expected an array on the CPU or a CUDA GPU, got one on "
                     f"{sorted(platforms)}")


def _checked(x: Any, S: Any, U: Any, bias: Any, activation: str, dropout_p: float, seed: int,
             inner_activation: str = "none") -> tuple[int, int]:
    """Checks at trace time what the core would refuse at run time, with the same kind of
    message; returns (T·k, d_out)."""
    for name, a in (("x", x), ("S", S), ("U", U)) + ((("bias", bias),) if bias is not None else ()):
        if a.dtype not in _FLOATS:
            raise TypeError(f"sketched_matmul: {name}: expected float16, bfloat16, float32 or float64, got {a.dtype}")
        if a.dtype != x.dtype:
            raise TypeError(f"sketched_matmul: {name}: expected dtype {x.dtype} (x's), got {a.dtype}")
    for name, a in (("x", x), ("S", S), ("U", U), ("bias", bias)):
        _check_device(name, a)
    if x.ndim < 1 or S.ndim not in (2, 3) or U.ndim != S.ndim:
        raise ValueError(f"sketched_matmul: expected x (..., d_in), S (d_in, k) or (T, d_in, k) and U of S's rank, "
                         f"got shapes {x.shape}, {S.shape}, {U.shape}")
    terms = S.shape[0] if S.ndim == 3 else 1
    if S.shape[-2] != x.shape[-1] or U.shape[-2] != S.shape[-1] or (S.ndim == 3 and U.shape[0] != terms):
        raise ValueError(f"sketched_matmul: shapes do not chain: x {x.shape}, S {S.shape}, U {U.shape}")
    if bias is not None and bias.shape != (U.shape[-1],):
        raise ValueError(f"sketched_matmul: bias: expected shape ({U.shape[-1]},), got {bias.shape}")
    if activation not in sketchcore.ACTIVATIONS:
        raise ValueError(f"sketched_matmul: activation: expected one of {sketchcore.ACTIVATIONS}, got {activation!r}")
    if inner_activation not in sketchcore.ACTIVATIONS:
        raise ValueError(f"sketched_matmul: inner_activation: expected one of {sketchcore.ACTIVATIONS}, "
                         f"got {inner_activation!r}")
    if not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"sketched_matmul: dropout_p: expected a probability in [0, 1], got {dropout_p}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
        raise ValueError(f"sketched_matmul: seed: expected an int in [0, 2**64), got {seed!r}")
    return terms * S.shape[-1], U.shape[-1]


def _attributes(activation: str, scale: float, dropout_p: float, seed: int, has_bias: bool,
                inner_activation: str) -> dict[str, Any]:
    return {"activation": activation, "inner_activation": inner_activation, "scale": np.float64(scale),
            "dropout_p": np.float64(dropout_p),
            # A uint64 attribute ≥ 2**63 fails in MLIR's Python bindings: the bits go as an int64.
            "seed": np.int64(seed - 2**64 if seed >= 2**63 else seed), "has_bias": np.bool_(has_bias)}


def _placeholder(bias: Optional[jax.Array], dtype: Any) -> jax.Array:
    return bias if bias is not None else jnp.zeros((0,), dtype)


def _forward_call(x, S, U, bias, activation, scale, dropout_p, seed, inner_activation):
    width, d_out = _checked(x, S, U, bias, activation, dropout_p, seed, inner_activation)
    lead = x.shape[:-1]
    call = jax.ffi.ffi_call(_FORWARD, (jax.ShapeDtypeStruct(lead + (d_out,), x.dtype),
                                       jax.ShapeDtypeStruct(lead + (width,), x.dtype)), vmap_method="sequential")
    return call(x, S, U, _placeholder(bias, x.dtype), **_attributes(activation, scale, dropout_p, seed,
                                                                     bias is not None, inner_activation))


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6, 7, 8))
def _sketched_matmul(x, S, U, bias, activation, scale, dropout_p, seed, inner_activation):
    return _forward_call(x, S, U, bias, activation, scale, dropout_p, seed, inner_activation)[0]


def _vjp_forward(x, S, U, bias, activation, scale, dropout_p, seed, inner_activation):
    # The residual z is the pre-activation x·S: the backward recomputes σ(z) and σ′(z) from it.
    y, z = _forward_call(x, S, U, bias, activation, scale, dropout_p, seed, inner_activation)
    return y, (x, S, U, bias, z)


def _vjp_backward(activation, scale, dropout_p, seed, inner_activation, residuals, grad):
    x, S, U, bias, z = residuals
    bias_shape = bias.shape if bias is not None else (0,)
    shapes = tuple(jax.ShapeDtypeStruct(s, x.dtype) for s in (x.shape, S.shape, U.shape, bias_shape))
    call = jax.ffi.ffi_call(_BACKWARD, shapes, vmap_method="sequential")
    dx, dS, dU, dbias = call(grad, x, S, U, z, _placeholder(bias, x.dtype),
                             **_attributes(activation, scale, dropout_p, seed, bias is not None, inner_activation))
    return dx, dS, dU, (dbias if bias is not None else None)


_sketched_matmul.defvjp(_vjp_forward, _vjp_backward)


def sketched_matmul(x: jax.Array, S: jax.Array, U: jax.Array, bias: Optional[jax.Array] = None, *,
                    activation: str = "none", scale: float = 1.0, dropout_p: float = 0.0, seed: int = 0,
                    inner_activation: str = "none") -> jax.Array:
    """``dropout(activation(scale * sum_t σ(x @ S[t]) @ U[t] + bias))`` for JAX arrays on the
    CPU or a CUDA GPU, as :func:`sketchcore.sketched_matmul` computes it for NumPy arrays (the same
    results, dropout masks included), differentiable in x, S, U and bias.

    ``activation``, ``scale``, ``dropout_p`` and ``seed`` are static (Python values, part of
    the traced computation); ``seed`` is the dropout seed in [0, 2**64), deterministic: pass
    a new one per step for fresh masks. Shapes and dtypes are checked when the call is traced.

    Parameters
    ----------
    x : jax.Array, shape (..., d_in)
    S : jax.Array, shape (d_in, k) or (T, d_in, k)
    U : jax.Array, shape (k, d_out) or (T, k, d_out)
        2-D exactly when ``S`` is.
    bias : jax.Array, shape (d_out,), optional
    activation : {"none", "relu", "gelu", "gelu_tanh", "silu"}
    scale : float
    dropout_p : float
        Inverted-dropout probability in [0, 1].
    seed : int
        Dropout seed in [0, 2**64).
    inner_activation : {"none", "relu", "gelu", "gelu_tanh", "silu"}
        σ on the (..., T·k) intermediate (static, like ``activation``).

    Returns
    -------
    jax.Array, shape (..., d_out)
        Of ``x``'s dtype (float16, bfloat16, float32 or float64).

    Raises
    ------
    TypeError
        A dtype that is not floating, or differs from ``x``'s.
    ValueError
        Shapes that do not chain, a bias of the wrong shape, an unknown activation or inner activation,
        ``dropout_p`` outside [0, 1], a bad seed, an array on a device other than the CPU or
        (with the CUDA backend) a CUDA GPU.
    RuntimeError
        An array on a CUDA GPU while the gated path ``jax_cuda_handlers`` is closed.

    Examples
    --------
    >>> x, S, U = jnp.ones((2, 3)), jnp.ones((3, 2)), jnp.ones((2, 4))
    >>> sketched_matmul(x, S, U, scale=0.5)
    Array([[3., 3., 3., 3.],
           [3., 3., 3., 3.]], dtype=float32)
    >>> jax.grad(lambda S: sketched_matmul(x, S, U).sum())(S)
    Array([[8., 8.],
           [8., 8.],
           [8., 8.]], dtype=float32)
    >>> sketched_matmul(x, jnp.ones((4, 2)), U)
    Traceback (most recent call last):
    ValueError: sketched_matmul: shapes do not chain: x (2, 3), S (4, 2), U (2, 4)...
    """
    return _sketched_matmul(x, S, U, bias, activation, float(scale), float(dropout_p), seed, inner_activation)
