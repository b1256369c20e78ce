from collections.abc import Collection
from typing import Any, Literal, TypeVar

# Results are arrays of x's (or grad_out's) framework: NumPy in, NumPy out; torch in, torch out.
ArrayT = TypeVar("ArrayT")
Gradient = Literal["x", "S", "U", "bias"]

Activation = Literal["none", "relu", "gelu", "gelu_tanh", "silu"]

def sketched_matmul(
    x: ArrayT,
    S: Any,
    U: Any,
    *,
    bias: Any | None = None,
    activation: Activation | None = "none",
    scale: float = 1.0,
    dropout_p: float = 0.0,
    seed: int | None = None,
    out: ArrayT | None = None,
    intermediate: Any | None = None,
    inner_activation: Activation | None = None,
) -> ArrayT: ...
def sketched_matmul_backward(
    grad_out: ArrayT,
    x: Any,
    S: Any,
    U: Any,
    intermediate: Any,
    *,
    bias: Any | None = None,
    activation: Activation | None = "none",
    scale: float = 1.0,
    dropout_p: float = 0.0,
    seed: int | None = None,
    needs: Collection[Gradient] | None = None,
    S_terms: tuple[int, int] | None = None,
    U_terms: tuple[int, int] | None = None,
    inner_activation: Activation | None = None,
) -> tuple[ArrayT | None, ArrayT | None, ArrayT | None, ArrayT | None]: ...
