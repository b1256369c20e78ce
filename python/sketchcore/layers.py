"""Framework-agnostic layer functions over sketched_matmul (no autograd: see
sketchcore.torch for differentiable PyTorch modules)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from sketchcore import _framework
from sketchcore._ops import sketched_matmul

if TYPE_CHECKING:
    from sketchcore._ops import Activation

ArrayT = TypeVar("ArrayT")


def sklinear(x: ArrayT, S1s: Any, S2s: Any, U1s: Any, U2s: Any, bias: Any | None = None, *,
             activation: Activation | None = "none") -> ArrayT:
    """Panther's sketched linear layer as one packed pair of GEMMs:

        activation(1/(2T) · Σ_t [(x S1_t) U1_t + (x U2_t) S2_t] + bias)

    with S1s (T, in, k), S2s (T, k, out), U1s (T, k, out), U2s (T, in, k); x (..., in).
    The 2T products are the terms of ``sketched_matmul(x, [S1s; U2s], [U1s; S2s],
    scale=1/(2T))``; the two concatenations copy the factors (small next to x).

    Parameters
    ----------
    x : array, shape (..., in)
        Any DLPack array (NumPy, torch, CuPy, ...).
    S1s : array, shape (T, in, k)
    S2s : array, shape (T, k, out)
    U1s : array, shape (T, k, out)
    U2s : array, shape (T, in, k)
        Panther's factors, of ``x``'s framework, dtype and device.
    bias : array, shape (out,), optional
    activation : {"none", "relu", "gelu", "gelu_tanh", "silu"}, optional

    Returns
    -------
    array, shape (..., out)
        A new array of ``x``'s framework (no autograd: see :class:`sketchcore.torch.SKLinear`).

    Raises
    ------
    ValueError
        A factor that is not 3-D, different numbers of terms, or shapes that do not chain
        (as :func:`sketchcore.sketched_matmul`).
    TypeError
        As :func:`sketchcore.sketched_matmul` (non-arrays, mixed dtypes or devices).

    Examples
    --------
    >>> import numpy as np, sketchcore
    >>> rng = np.random.default_rng(0)
    >>> T, d_in, k, d_out = 2, 16, 4, 8
    >>> x = rng.standard_normal((5, d_in))
    >>> S1s, U2s = rng.standard_normal((T, d_in, k)), rng.standard_normal((T, d_in, k))
    >>> U1s, S2s = rng.standard_normal((T, k, d_out)), rng.standard_normal((T, k, d_out))
    >>> y = sketchcore.sklinear(x, S1s, S2s, U1s, U2s)
    >>> ref = sum(x @ S1s[t] @ U1s[t] + x @ U2s[t] @ S2s[t] for t in range(T)) / (2 * T)
    >>> bool(np.allclose(y, ref))
    True
    """
    shapes = {"S1s": S1s.shape, "S2s": S2s.shape, "U1s": U1s.shape, "U2s": U2s.shape}
    for name, shape in shapes.items():
        if len(shape) != 3:
            raise ValueError(f"sklinear: {name}: expected a 3-D array (T, ., .), got shape {tuple(shape)}")
    terms = S1s.shape[0]
    if any(shape[0] != terms for shape in shapes.values()):
        raise ValueError(f"sklinear: expected the same number of terms T in S1s, S2s, U1s, U2s, got "
                         f"{ {name: shape[0] for name, shape in shapes.items()} }")
    return sketched_matmul(x, _framework.concatenate(S1s, U2s), _framework.concatenate(U1s, S2s), bias=bias, activation=activation,
                           scale=1.0 / (2 * terms))
