# pyright: strict
"""A user's script over the public API. CI type-checks it with `mypy --strict` and pyright in
strict mode (tests/typing/test_typing.py): annotations that were missing or `Any` where a
precise type exists fail here."""
from __future__ import annotations

import numpy as np
import numpy.typing as npt

import sketchcore
from sketchcore import memory, sketch

x: npt.NDArray[np.float32] = np.ones((4, 8), np.float32)
S = np.ones((8, 2), np.float32)
U = np.ones((2, 3), np.float32)

y = sketchcore.sketched_matmul(x, S, U, bias=np.zeros(3, np.float32), activation="relu", scale=0.5)
y_typed: npt.NDArray[np.float32] = y  # NumPy in, NumPy out
z = np.empty((4, 2), np.float32)
sketchcore.sketched_matmul(x, S, U, out=y, intermediate=z)
dx, dS, dU, db = sketchcore.sketched_matmul_backward(y, x, S, U, z, needs=("x", "U"))
if dx is not None:
    dx_typed: npt.NDArray[np.float32] = dx

stats = memory.stats()
in_use: int = stats["current_bytes"]
limit: int | None = stats["limit_bytes"]
memory.set_limit(1 << 30)
memory.set_limit(None)

op = sketch.gaussian(4, 8, seed=1)
dense: npt.NDArray[np.float64] = op.to_dense()
like: npt.NDArray[np.float32] = op.to_dense(like=x)
block = op.block(slice(0, 2), 3)
left: npt.NDArray[np.float32] = op @ S           # (4, 8) @ (8, 2)
right: npt.NDArray[np.float32] = S.T @ op.T      # (2, 8) @ (8, 4)
applied: npt.NDArray[np.float32] = op.apply(S, "left")
shape: tuple[int, int] = op.shape

k: int = sketch.jl_min_dim(1000, eps=0.1)
ks: npt.NDArray[np.int64] = sketch.jl_min_dim(np.array([10, 100]))

info = sketchcore.build_info()
blas: str = info["blas"]
version: str = sketchcore.__version__
sketchcore.set_num_threads(sketchcore.get_num_threads())
devices: int = sketchcore.cuda_device_count()
layer_out: npt.NDArray[np.float32] = sketchcore.sklinear(
    x, np.ones((1, 8, 2), np.float32), np.ones((1, 2, 3), np.float32), np.ones((1, 2, 3), np.float32),
    np.ones((1, 8, 2), np.float32))
print(y_typed.shape, in_use, limit, dense.shape, like.shape, block.shape, left.shape, right.shape, applied.shape,
      shape, k, ks, blas, version, devices, layer_out.shape, dS, dU, db)

from sketchcore import linalg  # noqa: E402

U_, s_, Vt_ = linalg.rsvd(x, 2, sketch="srht", seed=3)
u_typed: npt.NDArray[np.float32] = U_
Q_: npt.NDArray[np.float32] = linalg.rangefinder(x, 2)
print(u_typed.shape, s_.shape, Vt_.shape, Q_.shape)
x64 = np.ones((40, 6))
Qc, Rc, Jc = linalg.cqrrpt(x64, 1.25, seed=1)
qc_typed: npt.NDArray[np.float64] = Qc
Ur, Sr, Vr = linalg.randomized_svd(x64, 3, 1e-6, sketch="sparse_sign")
vr_typed: npt.NDArray[np.float64] = Vr
print(qc_typed.shape, Rc.shape, Jc.shape, Ur.shape, Sr.shape, vr_typed.shape)

sketchcore.set_cpu_blas("own")
mode: str = sketchcore.get_cpu_blas()
which: str = sketchcore.cpu_blas_of(x)
sketchcore.set_cpu_blas("framework")
sketchcore.set_gemm_tuning(False)
tuned: bool = sketchcore.get_gemm_tuning() or sketchcore.get_allow_tf32()
print(mode, which)

# Gated (not yet GPU-verified) paths.
gates: list[sketchcore.GatedPath] = sketchcore.gated_paths()
gate_names: list[str] = [g.name for g in gates if not g.enabled]
with sketchcore.gated_path("cuda_padded_inner_width", True):
    width: int = sketchcore.cuda_inner_width(375, "bfloat16")
sketchcore.set_gated_path("cuda_performer_kernels", None)
opened: bool = sketchcore.gated_path_enabled("cuda_performer_kernels")
print(gate_names, width, opened)

# The int8 sketched GEMM.
q8, s8 = sketchcore.quantize_int8(np.ones((4, 3), np.float32))
f8 = sketchcore.Int8Factor(q8, s8)
g8 = sketchcore.Int8Factor(*sketchcore.quantize_int8(np.ones((3, 5), np.float32)))
k8, n8 = f8.shape
y8: npt.NDArray[np.float32] = sketchcore.int8_sketched_matmul(
    np.ones((2, 4), np.float32), f8, g8, bias=None, activation="relu", inner_activation="silu"
)
packed_bytes: int = f8.nbytes + g8.q.size + int(g8.scale.size)
print(k8, n8, y8.shape, packed_bytes)

# The fp8 (e4m3) factors (the product needs a CUDA device, so this script only builds them).
codes, e4m3_scale = sketchcore.quantize_e4m3(np.ones((4, 3), np.float32))
e4m3_factor = sketchcore.Fp8Factor(codes, e4m3_scale)
e4m3_values: npt.NDArray[np.float32] = sketchcore.e4m3_decode(e4m3_factor.codes)
round_trip: npt.NDArray[np.uint8] = sketchcore.e4m3_encode(e4m3_values)
print(e4m3_factor.shape, e4m3_factor.nbytes, round_trip.shape, sketchcore.fp8_sketched_matmul)
