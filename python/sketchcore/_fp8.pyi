from typing import Any

import numpy as np
import numpy.typing as npt

from sketchcore._quantized import Activation as Activation
from sketchcore._quantized import ArrayT as ArrayT
from sketchcore._quantized import Fp8Factor as Fp8Factor
from sketchcore._quantized import fp8_sketched_matmul as fp8_sketched_matmul

E4M3_MAX: float

def e4m3_encode(values: Any) -> npt.NDArray[np.uint8]: ...
def e4m3_decode(codes: Any) -> npt.NDArray[np.float32]: ...
def quantize_e4m3(w: Any) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.float32]]: ...
