from typing import Any

ACTIVATION_CODES: dict[str, int]

def forward(x: Any, S: Any, U: Any, bias: Any, activation: int, scale: float, dropout_p: float, seed: int,
            keep_intermediate: bool, S_next: Any = None, U_next: Any = None, inner_activation: int = 0) -> Any: ...
def backward(grad: Any, x: Any, S: Any, U: Any, z: Any, bias: Any, activation: int, scale: float, dropout_p: float,
             seed: int, need_x: bool, need_S: bool, need_U: bool, need_bias: bool, S_next: Any = None,
             U_next: Any = None, S_begin: int = 0, S_end: int = -1, U_begin: int = 0,
             U_end: int = -1, inner_activation: int = 0) -> tuple[Any, Any, Any, Any] | None: ...
