from typing import Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt

# Results are arrays of x's framework (torch in, torch out; CuPy in, CuPy out).
ArrayT = TypeVar("ArrayT")
Activation = Literal["none", "relu", "gelu", "gelu_tanh", "silu"]

E4M3_MAX: float

def e4m3_encode(values: Any) -> npt.NDArray[np.uint8]: ...
def e4m3_decode(codes: Any) -> npt.NDArray[np.float32]: ...

class Fp8Factor:
    def __init__(self, codes: Any, scale: Any) -> None: ...
    @property
    def shape(self) -> tuple[int, int]: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def codes(self) -> npt.NDArray[np.uint8]: ...
    @property
    def scale(self) -> npt.NDArray[np.float32]: ...

def quantize_e4m3(w: Any) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.float32]]: ...
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
