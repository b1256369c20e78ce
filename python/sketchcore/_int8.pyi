from typing import Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt

# Results are arrays of x's framework: NumPy in, NumPy out; torch in, torch out.
ArrayT = TypeVar("ArrayT")
Activation = Literal["none", "relu", "gelu", "gelu_tanh", "silu"]
Int8Isa = Literal["amx", "avx512_vnni", "avx_vnni", "avx2", "portable"]

class Int8Factor:
    def __init__(self, q: Any, scale: Any) -> None: ...
    @property
    def shape(self) -> tuple[int, int]: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def q(self) -> npt.NDArray[np.int8]: ...
    @property
    def scale(self) -> npt.NDArray[np.float32]: ...

def quantize_int8(w: Any) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32]]: ...
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
def int8_gemm_isa() -> Int8Isa: ...
def set_int8_gemm_isa(name: Int8Isa) -> None: ...
def int8_gemm_isa_supported(name: str) -> bool: ...
def int8_peak_macs_per_second(name: Int8Isa, iterations: int = ...) -> float: ...
def _gemm_for_bench(
    x: Any, factor: Int8Factor, repeats: int = ...
) -> tuple[npt.NDArray[np.float32], list[float]]:
    """Private benchmark hook: the CPU int8 GEMM alone (x quantized once, untimed; seconds per run)."""
    ...
