from typing import Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt

# Results are arrays of x's framework: NumPy in, NumPy out; torch in, torch out.
ArrayT = TypeVar("ArrayT")
Activation = Literal["none", "relu", "gelu", "gelu_tanh", "silu"]

class QuantizedFactor:
    @property
    def shape(self) -> tuple[int, int]: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def scale(self) -> npt.NDArray[np.float32]: ...

class Int8Factor(QuantizedFactor):
    def __init__(self, q: Any, scale: Any) -> None: ...
    @property
    def q(self) -> npt.NDArray[np.int8]: ...

class Fp8Factor(QuantizedFactor):
    def __init__(self, codes: Any, scale: Any) -> None: ...
    @property
    def codes(self) -> npt.NDArray[np.uint8]: ...

def int8_sketched_matmul(
    x: ArrayT,
    S: Int8Factor,
    U: Int8Factor,
    *,
    bias: Any | None = None,
    activation: Activation | None = "none",
    inner_activation: Activation | None = None,
    out: ArrayT | None = None,
) -> ArrayT: ...
def int8_matmul(
    x: ArrayT,
    W: Int8Factor,
    *,
    bias: Any | None = None,
    activation: Activation | None = None,
    scale: float = 1.0,
    inner_activation: Literal["none"] | None = None,
    out: ArrayT | None = None,
) -> ArrayT: ...
def fp8_sketched_matmul(
    x: ArrayT,
    S: Fp8Factor,
    U: Fp8Factor,
    *,
    bias: Any | None = None,
    activation: Activation | None = "none",
    inner_activation: Activation | None = None,
    out: ArrayT | None = None,
) -> ArrayT: ...
