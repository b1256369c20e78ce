from collections.abc import Collection
from typing import Any, Literal, TypeVar

# Results are arrays of q's (or grad_out's) framework: NumPy in, NumPy out; torch in, torch out.
ArrayT = TypeVar("ArrayT")
Kernel = Literal["softmax", "relu"]
Gradient = Literal["q", "k", "v"]

def performer_attention(
    q: ArrayT,
    k: Any,
    v: Any,
    features: Any,
    *,
    kernel: Kernel = "softmax",
    causal: bool = False,
    key_weights: Any | None = None,
    value_weights: Any | None = None,
    out: ArrayT | None = None,
) -> ArrayT: ...
def performer_attention_backward(
    grad_out: ArrayT,
    q: Any,
    k: Any,
    v: Any,
    features: Any,
    out: Any,
    *,
    kernel: Kernel = "softmax",
    causal: bool = False,
    key_weights: Any | None = None,
    value_weights: Any | None = None,
    needs: Collection[Gradient] | None = None,
) -> tuple[ArrayT | None, ArrayT | None, ArrayT | None]: ...
