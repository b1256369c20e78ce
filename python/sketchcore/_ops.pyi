from collections.abc import Collection
from typing import Any, Literal, TypedDict, TypeVar

# Results are arrays of x's (or grad_out's) framework: NumPy in, NumPy out; torch in, torch out.
ArrayT = TypeVar("ArrayT")
Gradient = Literal["x", "S", "U", "bias"]

Activation = Literal["none", "relu", "gelu", "gelu_tanh", "silu"]

class BuildInfo(TypedDict):
    version: str
    blas: str
    cuda: bool
    cuda_runtime_version: int
    cpu_bf16_gemm: bool

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
) -> tuple[ArrayT | None, ArrayT | None, ArrayT | None, ArrayT | None]: ...
def set_num_threads(num_threads: int) -> None: ...
def get_num_threads() -> int: ...
def build_info() -> BuildInfo: ...
def cpu_blas_of(x: Any) -> str: ...
def _reset_framework_gemm() -> None: ...
def _install_framework_gemm(framework: int, sgemm: int, dgemm: int, index_bits: int, description: str) -> None: ...
def cuda_device_count() -> int: ...
def activation_names() -> tuple[str, ...]: ...
