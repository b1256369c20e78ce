from typing import Any, Literal, TypedDict

Activation = Literal["none", "relu", "gelu", "gelu_tanh", "silu"]

class BuildInfo(TypedDict):
    version: str
    blas: str
    cuda: bool
    cuda_runtime_version: int

def sketched_matmul(
    x: Any,
    S: Any,
    U: Any,
    *,
    bias: Any | None = None,
    activation: Activation | None = "none",
    scale: float = 1.0,
    dropout_p: float = 0.0,
    seed: int | None = None,
    out: Any | None = None,
    intermediate: Any | None = None,
) -> Any: ...
def sketched_matmul_backward(
    grad_out: Any,
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
    needs: tuple[str, ...] | None = None,
    S_terms: tuple[int, int] | None = None,
    U_terms: tuple[int, int] | None = None,
) -> tuple[Any | None, Any | None, Any | None, Any | None]: ...
def set_num_threads(num_threads: int) -> None: ...
def get_num_threads() -> int: ...
def build_info() -> BuildInfo: ...
def cuda_device_count() -> int: ...
